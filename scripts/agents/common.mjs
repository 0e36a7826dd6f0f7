// What every framework script of scripts/check-agents.sh shares: the command
// line, the gateway's model, the weather tool, a fetch that watches the model
// calls the framework makes, finishing the session and the one JSON line of
// the result.
//
//   node scripts/agents/<framework>.mjs [--url URL] [--api chat|responses] [--stream] [--session ID]
//
// URL defaults to $ROLLFLEET_GATEWAY, then http://127.0.0.1:8080. The line
// printed is {framework, api, stream, session, calls, ok, error?, answer,
// streamed, last_completion_tokens, last_token_ids?, http_error?}: calls
// counts the model calls the gateway answered with a 2xx, streamed those
// answered with an event stream; last_* describe the last of them as the
// client received it (token ids when the API returns them).
import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";

// The frameworks live where scripts/fetch-agents.sh installs them, outside
// the tree Node searches from these scripts, so they are loaded from there.
const agentsDir = path.resolve(
  process.env.ROLLFLEET_AGENTS || path.join(path.dirname(fileURLToPath(import.meta.url)), "../../.cache/agents"),
);

/** need loads an installed framework package (run scripts/fetch-agents.sh first). */
export function need(name) {
  try {
    return createRequire(path.join(agentsDir, "package.json"))(name);
  } catch (err) {
    throw new Error(`${name} is not installed in ${agentsDir}: run scripts/fetch-agents.sh (${err.message.split("\n")[0]})`);
  }
}

/** The weather question every run asks. */
export const question = "What is the weather in Paris?";

/** getWeather is the tool's implementation: a fixed forecast. */
export function getWeather({ city }) {
  return JSON.stringify({ city, forecast: "sunny", celsius: 22 });
}

/** The tool's JSON schema, for frameworks that take one. */
export const weatherParameters = {
  type: "object",
  properties: { city: { type: "string", description: "The city to report on." } },
  required: ["city"],
  additionalProperties: false,
};

/** Reads the command line and the gateway's model; returns the run's settings. */
export async function setup(framework, apis) {
  const argv = process.argv.slice(2);
  const opt = (name, def) => {
    const i = argv.indexOf(name);
    return i >= 0 && i + 1 < argv.length ? argv[i + 1] : def;
  };
  const url = opt("--url", process.env.ROLLFLEET_GATEWAY || "http://127.0.0.1:8080").replace(/\/+$/, "");
  const api = opt("--api", apis[0]);
  if (!apis.includes(api)) throw new Error(`${framework}: --api must be one of ${apis.join(", ")}`);
  const stream = argv.includes("--stream");
  const session = opt("--session", `${framework}-${api}-${stream ? "stream" : "plain"}-${randomUUID().slice(0, 8)}`);
  const models = await (await fetch(`${url}/v1/models`)).json();
  const model = models?.data?.[0]?.id;
  if (!model) throw new Error(`${framework}: GET ${url}/v1/models served no model`);
  const run = { framework, api, stream, url, baseURL: `${url}/v1`, model, session, calls: 0, streamed: 0, last: null, httpError: null };
  run.headers = { "X-Session-ID": session };
  run.fetch = watchingFetch(run);
  return run;
}

// watchingFetch passes every request through unchanged and notes, for the
// model calls, whether the gateway answered them and what the last one
// returned, so that the checker can compare it with the trajectory.
function watchingFetch(run) {
  return async (input, init) => {
    const res = await fetch(input, init);
    const target = typeof input === "string" ? input : input.url ?? String(input);
    if (!/\/(chat\/completions|responses)$/.test(new URL(target).pathname)) return res;
    const body = await res.clone().text();
    if (!res.ok) {
      run.httpError ??= `${res.status} ${errorMessage(body)}`;
      return res;
    }
    run.calls++;
    run.last = lastCall(body, (res.headers.get("content-type") || "").includes("event-stream"));
    if (run.last.streamed) run.streamed++;
    return res;
  };
}

function errorMessage(body) {
  try {
    return JSON.parse(body).error?.message ?? body;
  } catch {
    return body;
  }
}

// lastCall reads the completion's token ids (chat: choices[0].token_ids with
// return_token_ids, a stream's chunks each carrying their delta's ids;
// Responses: an output item's generation_token_ids, in a stream on the
// response of its last event) and usage out of a JSON answer or out of the
// events of a stream.
function lastCall(body, sse) {
  const docs = sse
    ? body.split("\n").filter((l) => l.startsWith("data:") && !l.includes("[DONE]")).map((l) => JSON.parse(l.slice(5)))
    : [JSON.parse(body)];
  const out = { streamed: sse, completion_tokens: null, token_ids: null };
  for (const d0 of docs) {
    const d = d0.response ?? d0; // Responses stream events wrap the response
    const usage = d.usage;
    if (usage) out.completion_tokens = usage.completion_tokens ?? usage.output_tokens ?? out.completion_tokens;
    const delta = d.choices?.[0]?.token_ids;
    if (delta) out.token_ids = [...(out.token_ids ?? []), ...delta];
    const whole = d.output?.find((o) => o.generation_token_ids)?.generation_token_ids;
    if (whole) out.token_ids = whole;
  }
  return out;
}

/**
 * Runs body(run) → the final answer, then finishes the session (when the
 * gateway recorded any call) with reward 1 and prints the result line. The
 * exit status is 0 even on failure: the line says what happened.
 */
export async function main(framework, apis, body) {
  let run;
  const result = { framework, api: null, stream: null, session: null, calls: 0, ok: false };
  try {
    run = await setup(framework, apis);
    Object.assign(result, { api: run.api, stream: run.stream, session: run.session });
    result.answer = await body(run);
  } catch (err) {
    result.error = String(err?.message ?? err).split("\n")[0];
  }
  if (run) {
    result.calls = run.calls;
    if (run.calls > 0) {
      const res = await fetch(`${run.url}/v1/sessions/${encodeURIComponent(run.session)}/finish`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ reward: 1 }),
      });
      if (!res.ok) result.error ??= `finish: ${res.status} ${errorMessage(await res.text())}`;
    }
    if (run.httpError) result.http_error = run.httpError;
    result.streamed = run.streamed;
    result.last_completion_tokens = run.last?.completion_tokens ?? null;
    if (run.last?.token_ids) result.last_token_ids = run.last.token_ids;
  }
  result.ok = !result.error && result.calls >= 2 && typeof result.answer === "string" && result.answer.length > 0;
  if (!result.ok && !result.error) result.error = `${result.calls} model call(s), answer ${JSON.stringify(result.answer ?? null)}`;
  console.log(JSON.stringify(result));
}
