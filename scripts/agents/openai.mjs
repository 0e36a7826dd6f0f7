// The plain OpenAI SDK with a hand-written tool loop, on the chat completions
// API (--api chat, asking for token ids as vLLM clients do) or the Responses
// API (--api responses, re-sending the whole input each turn: the gateway
// keeps no responses). --stream uses the SDK's streaming helpers.
import { getWeather, main, need, question, weatherParameters } from "./common.mjs";

const { default: OpenAI } = need("openai");
const maxCalls = 3;

await main("openai", ["chat", "responses"], async (run) => {
  const client = new OpenAI({ baseURL: run.baseURL, apiKey: "rollfleet", defaultHeaders: run.headers, fetch: run.fetch, maxRetries: 0 });
  return run.api === "chat" ? chatLoop(client, run) : responsesLoop(client, run);
});

async function chatLoop(client, run) {
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city.", parameters: weatherParameters } }];
  const messages = [{ role: "user", content: question }];
  for (let i = 0; i < maxCalls; i++) {
    const params = { model: run.model, messages, tools, return_token_ids: true };
    const completion = run.stream
      ? await client.chat.completions.stream({ ...params, stream_options: { include_usage: true } }).finalChatCompletion()
      : await client.chat.completions.create(params);
    const msg = completion.choices[0].message;
    messages.push({ role: "assistant", content: msg.content ?? null, ...(msg.tool_calls?.length ? { tool_calls: msg.tool_calls } : {}) });
    if (!msg.tool_calls?.length) return msg.content;
    for (const call of msg.tool_calls) {
      messages.push({ role: "tool", tool_call_id: call.id, content: getWeather(JSON.parse(call.function.arguments)) });
    }
  }
  throw new Error(`no answer after ${maxCalls} calls`);
}

async function responsesLoop(client, run) {
  const tools = [{ type: "function", name: "get_weather", description: "Weather of a city.", parameters: weatherParameters, strict: true }];
  const input = [{ role: "user", content: question }];
  for (let i = 0; i < maxCalls; i++) {
    const params = { model: run.model, input, tools };
    const response = run.stream ? await client.responses.stream(params).finalResponse() : await client.responses.create(params);
    const calls = response.output.filter((o) => o.type === "function_call");
    if (calls.length === 0) return response.output_text;
    for (const call of calls) {
      input.push({ type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments });
      input.push({ type: "function_call_output", call_id: call.call_id, output: getWeather(JSON.parse(call.arguments)) });
    }
  }
  throw new Error(`no answer after ${maxCalls} calls`);
}
