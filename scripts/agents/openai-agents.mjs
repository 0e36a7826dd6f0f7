// The OpenAI Agents SDK: an Agent with a get_weather tool, played by run(),
// on the Responses API (the SDK's default, --api responses) or the chat
// completions API (--api chat); --stream runs it streamed.
import { getWeather, main, need, question } from "./common.mjs";

const agents = need("@openai/agents");
const { default: OpenAI } = need("openai");
const { z } = need("zod");

await main("openai-agents", ["responses", "chat"], async (run) => {
  agents.setTracingDisabled(true);
  agents.setDefaultOpenAIClient(
    new OpenAI({ baseURL: run.baseURL, apiKey: "rollfleet", defaultHeaders: run.headers, fetch: run.fetch, maxRetries: 0 }),
  );
  agents.setOpenAIAPI(run.api === "chat" ? "chat_completions" : "responses");
  const weather = agents.tool({
    name: "get_weather",
    description: "Weather of a city.",
    parameters: z.object({ city: z.string() }),
    execute: getWeather,
  });
  const agent = new agents.Agent({ name: "weather", instructions: "Answer with the weather tool.", model: run.model, tools: [weather] });
  const result = await agents.run(agent, question, { stream: run.stream, maxTurns: 3 });
  if (run.stream) {
    for await (const _ of result.toTextStream()); // drains the stream
    await result.completed;
    if (result.error) throw result.error;
  }
  return result.finalOutput;
});
