// LangChain: ChatOpenAI (chat completions, or the Responses API with
// --api responses) in langchain's createAgent loop with a get_weather tool;
// --stream streams the agent's messages, as LangChain streams an agent: the
// model streams each call. (ChatOpenAI with streaming on under a plain
// invoke would instead estimate usage with a tiktoken table it downloads.)
import { getWeather, main, need, question } from "./common.mjs";

const { ChatOpenAI } = need("@langchain/openai");
const { createAgent, tool } = need("langchain");
const { z } = need("zod");

await main("langchain", ["chat", "responses"], async (run) => {
  const model = new ChatOpenAI({
    model: run.model,
    apiKey: "rollfleet",
    streaming: run.stream,
    useResponsesApi: run.api === "responses",
    maxRetries: 0,
    configuration: { baseURL: run.baseURL, defaultHeaders: run.headers, fetch: run.fetch },
  });
  const weather = tool(getWeather, { name: "get_weather", description: "Weather of a city.", schema: z.object({ city: z.string() }) });
  const agent = createAgent({ model, tools: [weather] });
  const input = { messages: [{ role: "user", content: question }] };
  let state;
  if (run.stream) {
    for await (const [mode, chunk] of await agent.stream(input, { recursionLimit: 8, streamMode: ["messages", "values"] })) {
      if (mode === "values") state = chunk;
    }
  } else {
    state = await agent.invoke(input, { recursionLimit: 8 });
  }
  const last = state.messages.at(-1);
  return typeof last.content === "string" ? last.content : last.text;
});
