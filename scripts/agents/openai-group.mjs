// A group of samples through the plain OpenAI SDK, as GRPO-style training
// draws them: one chat completion with n = 4 (--stream: the SDK's streaming
// helper), then each sample's tool loop goes on in the session the gateway
// recorded it in (choice k: the call's session for k = 0, "<session>~k" for
// the others), and each sample is finished with its own reward. Prints one
// result line per sample, each with the group it must be recorded in, for
// scripts/agents/table.mjs.
//
//   node scripts/agents/openai-group.mjs [--url URL] [--stream]
import { getWeather, need, question, setup, weatherParameters } from "./common.mjs";

const { default: OpenAI } = need("openai");
const n = 4;
const maxCalls = 3;

const run = await setup("openai-group", ["chat"]);
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city.", parameters: weatherParameters } }];
const first = [{ role: "user", content: question }];
const client = (session) => new OpenAI({ baseURL: run.baseURL, apiKey: "rollfleet", defaultHeaders: { "X-Session-ID": session }, maxRetries: 0 });

const samples = Array.from({ length: n }, (_, k) => ({
  session: k === 0 ? run.session : `${run.session}~${k}`,
  messages: [...first],
  calls: 0,
  last: null,
  error: null,
}));

try {
  const params = { model: run.model, messages: first, tools, n, temperature: 1, return_token_ids: true };
  const completion = run.stream
    ? await client(run.session).chat.completions.stream(params).finalChatCompletion()
    : await client(run.session).chat.completions.create(params);
  if (completion.choices.length !== n) throw new Error(`${completion.choices.length} choices for n = ${n}`);
  for (const choice of completion.choices) {
    const s = samples[choice.index];
    if (choice.session_id !== undefined && choice.session_id !== s.session) s.error = `choice ${choice.index} names session ${choice.session_id}`;
    s.calls++;
    s.last = choice;
  }
} catch (err) {
  for (const s of samples) s.error = String(err?.message ?? err).split("\n")[0];
}

// Each sample's conversation goes on alone, in its own session.
await Promise.all(
  samples.map(async (s, k) => {
    try {
      while (!s.error) {
        const msg = s.last.message;
        s.messages.push({ role: "assistant", content: msg.content ?? null, ...(msg.tool_calls?.length ? { tool_calls: msg.tool_calls } : {}) });
        if (!msg.tool_calls?.length) {
          s.answer = msg.content;
          break;
        }
        if (s.calls >= maxCalls) throw new Error(`no answer after ${maxCalls} calls`);
        for (const call of msg.tool_calls) {
          s.messages.push({ role: "tool", tool_call_id: call.id, content: getWeather(JSON.parse(call.function.arguments)) });
        }
        const next = await client(s.session).chat.completions.create({ model: run.model, messages: s.messages, tools, return_token_ids: true });
        s.calls++;
        s.last = next.choices[0];
      }
    } catch (err) {
      s.error = String(err?.message ?? err).split("\n")[0];
    }
    if (s.calls > 0) {
      const res = await fetch(`${run.url}/v1/sessions/${encodeURIComponent(s.session)}/finish`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ reward: k / n }),
      });
      if (!res.ok) s.error ??= `finish: ${res.status} ${await res.text()}`;
    }
  }),
);

for (const [k, s] of samples.entries()) {
  const result = {
    framework: `openai n=${n}, sample ${k}`, api: "chat", stream: run.stream, session: s.session, calls: s.calls,
    // The first call's answer counts as streamed for every sample it holds.
    streamed: run.stream ? 1 : 0, stream_calls: run.stream ? 1 : 0,
    ok: !s.error && typeof s.answer === "string" && s.answer.length > 0, answer: s.answer,
    group: { id: run.session, index: k, size: n },
  };
  // A streamed answer's choices lose their token ids in the SDK's helper.
  if (s.last?.token_ids) result.last_token_ids = s.last.token_ids;
  if (s.error) result.error = s.error;
  else if (!result.ok) result.error = `answer ${JSON.stringify(s.answer ?? null)}`;
  console.log(JSON.stringify(result));
}
