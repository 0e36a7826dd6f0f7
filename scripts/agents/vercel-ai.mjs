// The Vercel AI SDK: generateText (or streamText with --stream) with a
// get_weather tool and a step limit, through @ai-sdk/openai's chat model
// (--api chat) or its Responses model (--api responses, the provider's
// default).
import { getWeather, main, need, question } from "./common.mjs";

const ai = need("ai");
const { createOpenAI } = need("@ai-sdk/openai");
const { z } = need("zod");

await main("vercel-ai", ["chat", "responses"], async (run) => {
  const provider = createOpenAI({ baseURL: run.baseURL, apiKey: "rollfleet", headers: run.headers, fetch: run.fetch });
  const settings = {
    model: run.api === "chat" ? provider.chat(run.model) : provider.responses(run.model),
    prompt: question,
    tools: {
      get_weather: ai.tool({ description: "Weather of a city.", inputSchema: z.object({ city: z.string() }), execute: getWeather }),
    },
    stopWhen: ai.stepCountIs(3),
    maxRetries: 0,
  };
  if (!run.stream) return (await ai.generateText(settings)).text;
  let failure;
  const result = ai.streamText({ ...settings, onError: ({ error }) => (failure ??= error) });
  await result.consumeStream();
  if (failure) throw failure;
  return await result.text;
});
