#!/usr/bin/env node
// check-chat-tokens: an outside reader of rollfleet's output. It recomputes the token ids of
// chat conversations with the JavaScript reference implementation of Hugging Face tokenizers
// and chat templates (@lenml/tokenizers, a transformers.js fork, templates compiled by
// @huggingface/jinja) — the reference rollfleet's Go tokenizer and template renderer were
// proven equal to — and compares them with the ids rollfleet recorded or served.
//
//   trajectories FILE.jsonl  trajectories `rollout run --out` wrote, chat style, with messages:
//     (a) every turn's prompt tokens = encode(template(messages before that turn, generation prompt))
//     (b) every action the model ended ends with the template's end-of-turn id (or an eos id)
//         and holds no other special token
//     (c) a trajectory the env answered last = encode(template(all messages))
//   gateway --url URL        acts as an agent (tools, tool results) through the gateway and
//     checks each call's prompt_token_ids against the template and its token_ids' ending
//   responses --url URL      the same agent over the Responses API (reasoning items, function
//     calls and their outputs sent back as input items); also counts the sessions' segments
//   selftest                 the trajectories and gateway modes against fixtures made with the reference
//
// Differences that docs/run.md documents as history rewriting are counted apart, not as
// mismatches: history_rewrites (a template dropping the reasoning of past turns) and
// resampled_actions (an action whose sampled ids are not the canonical encoding of its text),
// and in the gateway modes continued_traces (a call the gateway continued from its session's
// trace because the template re-rendered the unchanged conversation to other tokens).
//
// Usage: see usage() or docs/models.md. Prints one JSON summary line; exit 0 when all checks
// pass, 1 on a mismatch or when nothing was checked, 2 on bad usage.
"use strict";
const { loadModel } = require("./chat-reference.cjs");
const fs = require("fs"), http = require("http"), os = require("os"), path = require("path"), readline = require("readline");

function usage(msg) {
  process.stderr.write(`check-chat-tokens: ${msg}
usage: check-chat-tokens.cjs trajectories FILE.jsonl --model-dir DIR [options]
       check-chat-tokens.cjs gateway|responses --url URL [--model NAME] [--sessions N] --model-dir DIR [options]
       check-chat-tokens.cjs selftest --model-dir DIR [options]
options: --kwargs JSON (chat template kwargs) --eos-ids ID,... --chat-template FILE --keep-argument-strings
`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { mode: argv[0], args: [], kwargs: {}, sessions: 4, eosIds: [] };
  const flags = { "--model-dir": "modelDir", "--kwargs": "kwargs", "--url": "url", "--model": "model",
    "--sessions": "sessions", "--eos-ids": "eosIds", "--chat-template": "chatTemplate" };
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--keep-argument-strings") o.keepArgumentStrings = true;
    else if (flags[a]) {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      o[flags[a]] = argv[++i];
    } else if (a.startsWith("--")) usage(`unknown flag ${a}`);
    else o.args.push(a);
  }
  if (!["trajectories", "gateway", "responses", "selftest"].includes(o.mode)) usage(`unknown mode ${JSON.stringify(o.mode)}`);
  if (!o.modelDir) usage("--model-dir is required");
  try {
    if (typeof o.kwargs === "string") o.kwargs = JSON.parse(o.kwargs);
  } catch (e) { usage(`--kwargs is not JSON: ${e.message}`); }
  if (typeof o.eosIds === "string") o.eosIds = o.eosIds.split(",").map(Number);
  if (o.eosIds.some((n) => !Number.isInteger(n))) usage("--eos-ids takes integer ids");
  o.sessions = Number(o.sessions);
  if (!(o.sessions > 0)) usage("--sessions must be positive");
  if (o.mode === "trajectories" && o.args.length !== 1) usage("trajectories takes one FILE.jsonl");
  if ((o.mode === "gateway" || o.mode === "responses") && !o.url) usage(`${o.mode} needs --url`);
  return o;
}

// Reference renders and tokenizes as transformers does for vLLM: template text, then encode
// without adding special tokens (the template writes them).
class Reference {
  constructor(o) {
    const { tok, Template, json } = loadModel(o.modelDir, o.chatTemplate, usage);
    this.tok = tok;
    this.Template = Template;
    this.kwargs = o.kwargs;
    this.keepArgumentStrings = !!o.keepArgumentStrings;
    this.specialIds = new Set(json.added_tokens.filter((t) => t.special).map((t) => t.id));
    // vLLM stops on the tokenizer's eos and on generation_config.json's eos_token_id.
    this.eosIds = new Set([this.tok.eos_token_id, ...o.eosIds].filter((n) => n !== undefined));
    const gen = path.join(o.modelDir, "generation_config.json");
    if (fs.existsSync(gen)) [JSON.parse(fs.readFileSync(gen, "utf8")).eos_token_id].flat().forEach((n) => n != null && this.eosIds.add(n));
    // The end-of-turn id is the token the template writes right after an assistant's text.
    const text = this.render([{ role: "user", content: "u" }, { role: "assistant", content: "XQZ" }], {});
    this.eot = this.encode(text.slice(text.lastIndexOf("XQZ") + 3))[0];
    if (!this.specialIds.has(this.eot)) usage(`the template writes no special token after an assistant message (got ${this.decode([this.eot])})`);
    this.eotText = this.decode([this.eot]);
    const gp = this.render([{ role: "user", content: "u" }], { agp: true });
    this.genPromptLen = this.encode(gp.slice(this.render([{ role: "user", content: "u" }], {}).length)).length;
  }
  render(messages, { tools = null, agp = false } = {}) {
    const source = this.tok.get_chat_template({ tools });
    if (!this.tok._compiled_template_cache.has(source)) this.tok._compiled_template_cache.set(source, new this.Template(source));
    return this.tok.apply_chat_template(messages, { ...this.kwargs, tokenize: false, chat_template: source, tools, add_generation_prompt: agp });
  }
  encode(text) { return Array.from(this.tok.encode(text, { add_special_tokens: false })); }
  decode(ids) { return this.tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }); }
  tokens(messages, opts) { return this.encode(this.render(messages, opts)); }
  // afterAssistant is what the template writes after an assistant turn when msgs follow it: the
  // common end of two renderings that differ only in that turn's text.
  afterAssistant(msgs, opts) {
    const base = [{ role: "user", content: "u" }];
    const a = this.tokens([...base, { role: "assistant", content: "a" }, ...msgs], opts);
    const b = this.tokens([...base, { role: "assistant", content: "b" }, ...msgs], opts);
    let n = 0;
    while (n < a.length && n < b.length && a[a.length - 1 - n] === b[b.length - 1 - n]) n++;
    return a.slice(a.length - n);
  }
}

// continued reports whether prompt is the gateway's documented continuation of a session's
// trace (gateway/doc.go): when the conversation came back unchanged but re-renders to tokens
// that do not extend the trace (a template dropping earlier reasoning), the prompt is the last
// call's prompt and completion followed by what the template writes after an assistant turn for
// the new messages, its end-of-turn token left out when the completion sampled it.
function continued(ref, prompt, last, newMsgs, opts) {
  if (!last) return false;
  let delta = ref.afterAssistant(newMsgs, opts);
  if (last.gen.length > 0 && last.gen[last.gen.length - 1] === delta[0]) delta = delta.slice(1);
  const want = [...last.prompt, ...last.gen, ...delta];
  return firstDiff(prompt, want) < 0;
}

// firstDiff is the first position where a and b differ (a length difference counts), or -1.
function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

// diffReport shows a difference at position p with decoded context on both sides.
function diffReport(ref, got, want, p) {
  const win = (ids) => ({ ids: ids.slice(p, p + 8), text: ref.decode(ids.slice(Math.max(0, p - 12), p + 12)) });
  return { position: p, got_len: got.length, want_len: want.length, got: win(got), want: win(want) };
}

// Summary counts the checks of a run; the first real mismatch and the first history rewrite are kept.
class Summary {
  constructor(ref, o, fields) {
    Object.assign(this, { model: path.basename(path.resolve(o.modelDir)), mode: o.mode, checked: 0, mismatches: 0 }, fields,
      { history_rewrites: 0, resampled_actions: 0, end_of_turn_id: ref.eot, eos_ids: [...ref.eosIds], first_mismatch: null,
        first_history_rewrite: null, first_resampled: null });
  }
  mismatch(counter, detail) {
    this[counter]++;
    this.mismatches++;
    if (!this.first_mismatch) this.first_mismatch = detail;
  }
  rewrite(detail) {
    this.history_rewrites++;
    if (!this.first_history_rewrite) this.first_history_rewrite = detail;
  }
  resampled(detail) {
    this.resampled_actions++;
    if (!this.first_resampled) this.first_resampled = detail;
  }
}

// checkEnding checks (b) on one action: its last token and the special tokens before it.
function checkEnding(ref, sum, action, where) {
  sum.eot_checked++;
  const last = action[action.length - 1];
  if (last !== ref.eot && ref.eosIds.has(last)) sum.eos_ended++;
  else if (last !== ref.eot) {
    return sum.mismatch("eot_mismatches", { ...where, check: "end_of_turn", got: last, got_text: ref.decode([last]), want: ref.eot, want_text: ref.eotText });
  }
  const i = action.slice(0, -1).findIndex((id) => ref.specialIds.has(id));
  if (i >= 0) sum.mismatch("eot_mismatches", { ...where, check: "special_token_in_action", offset: i, got: action[i], got_text: ref.decode([action[i]]) });
}

// isHistoryRewrite reports whether a difference at p lies in an earlier turn (its generation
// prompt or action) that carries think tags: templates such as Qwen3's drop the reasoning of
// past assistant messages, so re-rendering history cannot give the tokens the model saw.
function isHistoryRewrite(ref, obs, ranges, p, turns) {
  for (let j = 0; j < turns; j++) {
    const from = Math.max(0, ranges[j][0] - ref.genPromptLen);
    if (p >= from && p <= ranges[j][1]) return /<\/?think>/.test(ref.decode(obs.slice(from, ranges[j][1])));
  }
  return false;
}

// isResampled reports whether a difference at p lies in an earlier action whose ids are not the
// canonical encoding of their own text (a token the model sampled where the tokenizer would have
// merged differently): re-encoding the text cannot give back what was sampled, and the
// trajectory rightly keeps the sampled ids. The texts of both sequences must agree.
function isResampled(ref, got, want, ranges, p, turns) {
  for (let j = 0; j < turns; j++) {
    const [s, e] = ranges[j];
    if (p >= s && p < e) {
      const body = got.slice(s, e - 1);
      return ref.decode(got) === ref.decode(want) && ref.encode(ref.decode(body)).join() !== body.join();
    }
  }
  return false;
}

function compare(ref, sum, counter, t, got, want, where, turns) {
  const p = firstDiff(got, want);
  if (p < 0) return;
  const detail = { ...where, check: counter.replace("_mismatches", ""), ...diffReport(ref, got, want, p) };
  if (isHistoryRewrite(ref, t.observation_tokens, t.action_ranges, p, turns)) sum.rewrite(detail);
  else if (isResampled(ref, got, want, t.action_ranges, p, turns)) sum.resampled(detail);
  else sum.mismatch(counter, detail);
}

function checkTrajectory(ref, sum, t, line) {
  const msgs = t.messages;
  if (![undefined, "", "chat"].includes(t.obs_style) || !Array.isArray(msgs) || msgs.length === 0 || t.prompt_truncated_tokens > 0) {
    sum.skipped++;
    return;
  }
  sum.checked++;
  const obs = t.observation_tokens, ranges = t.action_ranges;
  const where = { line, episode_id: t.episode_id };
  const asst = msgs.flatMap((m, i) => (m.role === "assistant" ? [i] : []));
  if (asst.length !== ranges.length) {
    return sum.mismatch("shape_mismatches", { ...where, check: "shape", detail: `${asst.length} assistant messages for ${ranges.length} action ranges` });
  }
  ranges.forEach(([start, end], k) => {
    if (Array.isArray(t.responses) && t.responses[k] !== msgs[asst[k]].content) {
      sum.mismatch("shape_mismatches", { ...where, turn: k, check: "shape", detail: "the assistant message is not the turn's response" });
    }
    sum.prompts_checked++;
    compare(ref, sum, "prompt_mismatches", t, obs.slice(0, start), ref.tokens(msgs.slice(0, asst[k]), { agp: true }), { ...where, turn: k }, k);
    if (!(k === ranges.length - 1 && t.finish_reason === "length")) checkEnding(ref, sum, obs.slice(start, end), { ...where, turn: k, position: end - 1 });
  });
  if (msgs[msgs.length - 1].role !== "assistant") {
    // An episode the budget, the context window or the turn cap ended after the env's answer
    // holds the generation prompt of the turn it did not play.
    const open = t.truncated && ["budget", "context_length", "max_turns"].includes(t.finish_reason);
    sum.full_checked++;
    compare(ref, sum, "full_mismatches", t, obs, ref.tokens(msgs, { agp: open }), where, ranges.length);
  }
}

// checkTrajectories reads the file a line at a time: a run's JSONL can be large.
async function checkTrajectories(ref, o, file) {
  const sum = new Summary(ref, o, { skipped: 0, shape_mismatches: 0, prompts_checked: 0, prompt_mismatches: 0, eot_checked: 0, eot_mismatches: 0,
    eos_ended: 0, full_checked: 0, full_mismatches: 0, bad_lines: 0 });
  let line = 0;
  for await (const text of readline.createInterface({ input: fs.createReadStream(file), crlfDelay: Infinity })) {
    line++;
    if (text.trim() === "") continue;
    let t = {};
    try {
      t = JSON.parse(text);
      checkTrajectory(ref, sum, t, line);
    } catch (e) { // not JSON, a template that refuses the messages, or a malformed trajectory
      sum.mismatch("bad_lines", { line, episode_id: t.episode_id, check: "error", detail: String(e.message || e) });
    }
  }
  return sum;
}

const WEATHER_TOOL = { type: "function", function: { name: "get_weather", description: "Current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] } } };

// forTemplate gives request messages as vLLM hands them to the template: null content is "",
// tool call arguments are parsed objects (unless the template concatenates them as text).
function forTemplate(ref, messages) {
  return messages.map((m) => {
    const c = { ...m, content: m.content ?? "" };
    if (m.tool_calls && !ref.keepArgumentStrings) {
      c.tool_calls = m.tool_calls.map((tc) => ({ ...tc, function: { ...tc.function,
        arguments: typeof tc.function.arguments === "string" ? JSON.parse(tc.function.arguments || "{}") : tc.function.arguments } }));
    }
    return c;
  });
}

async function post(url, body, headers = {}) {
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, ok: res.ok, body: text && res.headers.get("content-type")?.includes("json") ? JSON.parse(text) : text };
}

async function checkGateway(ref, o) {
  const sum = new Summary(ref, o, { calls_checked: 0, prompt_mismatches: 0, continued_traces: 0, eot_checked: 0, eot_mismatches: 0, eos_ended: 0,
    request_failures: 0, segments: 0 });
  const base = o.url.replace(/\/+$/, "");
  const model = o.model || (await (await fetch(`${base}/v1/models`)).json()).data[0].id;
  const tools = [WEATHER_TOOL];
  for (let n = 0; n < o.sessions; n++) {
    const session = `chk-${n}`;
    const messages = [{ role: "system", content: "You are a weather assistant. Use the tool for weather questions." },
      { role: "user", content: `What is the weather in ${["Paris", "Oslo", "Lima", "Kyoto"][n % 4]} right now?` }];
    let last = null, lastLen = 0;
    for (let call = 0; call < 3; call++) {
      const where = { session, call };
      const res = await post(`${base}/v1/chat/completions`, { model, messages, tools, max_tokens: 256, return_token_ids: true,
        chat_template_kwargs: ref.kwargs }, { "X-Session-ID": session });
      const choice = res.ok && res.body.choices?.[0];
      const prompt = choice && (res.body.prompt_token_ids ?? choice.prompt_token_ids);
      if (!choice || !prompt || !choice.token_ids) {
        sum.mismatch("request_failures", { ...where, check: "request", status: res.status, body: JSON.stringify(res.body).slice(0, 500) });
        break;
      }
      sum.checked++;
      sum.calls_checked++;
      let want;
      try { want = ref.tokens(forTemplate(ref, messages), { tools, agp: true }); } catch (e) { // bad arguments, or the template refuses
        sum.mismatch("prompt_mismatches", { ...where, check: "template", error: String(e.message || e) });
        break;
      }
      const p = firstDiff(prompt, want);
      if (p >= 0 && continued(ref, prompt, last, messages.slice(lastLen), { tools, agp: true })) sum.continued_traces++;
      else if (p >= 0) sum.mismatch("prompt_mismatches", { ...where, check: "prompt", ...diffReport(ref, prompt, want, p) });
      if (["stop", "tool_calls"].includes(choice.finish_reason)) checkEnding(ref, sum, choice.token_ids, { ...where, finish_reason: choice.finish_reason });
      last = { prompt, gen: choice.token_ids };
      const reply = { role: "assistant", content: choice.message.content ?? null };
      if (choice.message.reasoning_content) reply.reasoning_content = choice.message.reasoning_content; // sent back, as agents do
      const calls = choice.message.tool_calls || [];
      if (calls.length > 0) reply.tool_calls = calls;
      messages.push(reply);
      lastLen = messages.length;
      if (calls.length > 0) calls.forEach((tc) => messages.push({ role: "tool", tool_call_id: tc.id, content: '{"temp_c": 21}' }));
      else messages.push({ role: "user", content: "And tomorrow?" });
    }
    const fin = await post(`${base}/v1/sessions/${session}/finish`, { reward: 1 });
    if (!fin.ok) sum.mismatch("request_failures", { session, check: "finish", status: fin.status, body: JSON.stringify(fin.body).slice(0, 500) });
    else sum.segments += (fin.body.segments || []).length;
  }
  return sum;
}

// checkResponses is the gateway mode over the Responses API, as a NeMo Gym agent speaks it: the
// conversation is sent whole each call as input items (the previous calls' output items, then a
// function_call_output or a new user message), and the last output item carries the call's
// prompt_token_ids and generation_token_ids. The expected prompt renders the same conversation
// as chat messages: instructions as the system message, a reasoning item as the assistant's
// reasoning_content, its text as content, function calls as tool_calls, outputs as tool
// messages. Finishing each session reports its segments: a template that rewrites history (Qwen3
// dropping past reasoning) makes every call a segment of its own.
async function checkResponses(ref, o) {
  const sum = new Summary(ref, o, { calls_checked: 0, prompt_mismatches: 0, eot_checked: 0, eot_mismatches: 0, eos_ended: 0,
    request_failures: 0, reasoning_items: 0, segments: 0, continued_traces: 0 });
  const base = o.url.replace(/\/+$/, "");
  const model = o.model || (await (await fetch(`${base}/v1/models`)).json()).data[0].id;
  const tool = { type: "function", name: WEATHER_TOOL.function.name, description: WEATHER_TOOL.function.description,
    parameters: WEATHER_TOOL.function.parameters };
  const system = "You are a weather assistant. Use the tool for weather questions.";
  for (let n = 0; n < o.sessions; n++) {
    const session = `rsp-${n}`;
    const question = `What is the weather in ${["Paris", "Oslo", "Lima", "Kyoto"][n % 4]} right now?`;
    const input = [{ type: "message", role: "user", content: question }];
    const messages = [{ role: "system", content: system }, { role: "user", content: question }];
    let prev = null, prevLen = 0;
    for (let call = 0; call < 3; call++) {
      const where = { session, call };
      const res = await post(`${base}/v1/responses`, { model, instructions: system, input, tools: [tool], max_output_tokens: 256,
        chat_template_kwargs: ref.kwargs }, { "X-Session-ID": session });
      const out = res.ok && res.body.output;
      const last = out && out[out.length - 1];
      if (!last || !last.prompt_token_ids || !last.generation_token_ids) {
        sum.mismatch("request_failures", { ...where, check: "request", status: res.status, body: JSON.stringify(res.body).slice(0, 500) });
        break;
      }
      sum.checked++;
      sum.calls_checked++;
      let want;
      try { want = ref.tokens(forTemplate(ref, messages), { tools: [WEATHER_TOOL], agp: true }); } catch (e) {
        sum.mismatch("prompt_mismatches", { ...where, check: "template", error: String(e.message || e) });
        break;
      }
      const p = firstDiff(last.prompt_token_ids, want);
      if (p >= 0 && continued(ref, last.prompt_token_ids, prev, messages.slice(prevLen), { tools: [WEATHER_TOOL], agp: true })) sum.continued_traces++;
      else if (p >= 0) sum.mismatch("prompt_mismatches", { ...where, check: "prompt", ...diffReport(ref, last.prompt_token_ids, want, p) });
      prev = { prompt: last.prompt_token_ids, gen: last.generation_token_ids };
      if (res.body.status === "completed") checkEnding(ref, sum, last.generation_token_ids, { ...where, status: res.body.status });
      const reply = { role: "assistant", content: "" };
      const calls = [];
      for (const it of out) {
        input.push(Object.fromEntries(Object.entries(it).filter(([k]) => !k.endsWith("token_ids") && k !== "generation_log_probs")));
        if (it.type === "reasoning") {
          sum.reasoning_items++;
          reply.reasoning_content = (reply.reasoning_content ?? "") + it.summary.map((x) => x.text).join("");
        } else if (it.type === "message") reply.content += it.content.map((x) => x.text).join("");
        else if (it.type === "function_call") calls.push({ id: it.call_id, type: "function", function: { name: it.name, arguments: it.arguments } });
      }
      if (calls.length > 0) reply.tool_calls = calls;
      messages.push(reply);
      prevLen = messages.length;
      if (calls.length > 0) {
        for (const tc of calls) {
          input.push({ type: "function_call_output", call_id: tc.id, output: '{"temp_c": 21}' });
          messages.push({ role: "tool", tool_call_id: tc.id, content: '{"temp_c": 21}' });
        }
      } else {
        input.push({ type: "message", role: "user", content: "And tomorrow?" });
        messages.push({ role: "user", content: "And tomorrow?" });
      }
    }
    const fin = await post(`${base}/v1/sessions/${session}/finish`, { reward: 1 });
    if (!fin.ok) sum.mismatch("request_failures", { session, check: "finish", status: fin.status, body: JSON.stringify(fin.body).slice(0, 500) });
    else sum.segments += (fin.body.segments || []).length;
  }
  return sum;
}

// produce builds a trajectory as an append-only producer does: the first prompt from the
// template, then each action (its text's tokens and the end-of-turn id), then the text the
// template puts between that action's end-of-turn and the next generation prompt.
function produce(ref, id, messages, finishReason) {
  const asst = messages.flatMap((m, i) => (m.role === "assistant" ? [i] : []));
  const tokens = ref.tokens(messages.slice(0, asst[0]), { agp: true });
  const ranges = [];
  asst.forEach((i, k) => {
    const start = tokens.length;
    tokens.push(...ref.encode(messages[i].content));
    if (!(finishReason === "length" && k === asst.length - 1)) tokens.push(ref.eot);
    ranges.push([start, tokens.length]);
    const next = k + 1 < asst.length ? asst[k + 1] : messages.length;
    if (next === i + 1) return;
    const text = ref.render(messages.slice(0, next), { agp: k + 1 < asst.length });
    const at = text.lastIndexOf(ref.eotText, text.lastIndexOf(messages[next - 1].content)) + ref.eotText.length;
    tokens.push(...ref.encode(text.slice(at)));
  });
  return { episode_id: id, obs_style: "chat", observation_tokens: tokens, action_ranges: ranges, finish_reason: finishReason,
    truncated: finishReason === "length", responses: asst.map((i) => messages[i].content), messages };
}

function fixture(ref) {
  const u = (content) => ({ role: "user", content }), a = (content) => ({ role: "assistant", content });
  return [
    produce(ref, "three-turns", [{ role: "system", content: "You play Wordle." }, u("Guess a five-letter word."), a("My guess: CRANE."),
      u("C and E are right. Guess again."), a("My guess: CLOSE."), u("Close! One letter off."), a("My guess: CHOSE."), u("Solved.")], "stop"),
    produce(ref, "cut-at-length", [u("Count to ten."), a("One, two, three."), u("Go on."), a("Four, five, six, seven")], "length"),
    produce(ref, "thinking", [u("How many r in strawberry?"), a("<think>\nLet me count.\n</think>\n\nThree."), u("Sure?"), a("Yes.")], "stop"),
    { episode_id: "single-turn", obs_style: "concat", samples: [] },
  ];
}

// fakeGateway answers chat calls as the gateway should, from the reference: a tool call on a
// session's first call, text after; corrupt drops the last prompt token.
function fakeGateway(ref, corrupt) {
  const calls = {};
  return http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d)).on("end", () => {
      const send = (o) => res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(o));
      if (req.url.endsWith("/finish")) return send({ ok: true });
      const r = JSON.parse(body), sid = req.headers["x-session-id"];
      const prompt = ref.tokens(forTemplate(ref, r.messages), { tools: r.tools, agp: true });
      if (corrupt) prompt.pop();
      calls[sid] = (calls[sid] || 0) + 1;
      const tool = calls[sid] === 1;
      const message = tool
        ? { role: "assistant", content: null, tool_calls: [{ id: `call_${sid}`, type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] }
        : { role: "assistant", content: "It is 21 °C." };
      send({ prompt_token_ids: prompt, choices: [{ index: 0, message, finish_reason: tool ? "tool_calls" : "stop",
        token_ids: [...ref.encode(tool ? '<tool_call>{"name": "get_weather"}</tool_call>' : message.content), ref.eot] }] });
    });
  });
}

async function selftest(ref, o) {
  const results = [];
  const expect = (name, sum, ok) => results.push({ name, ok: !!ok, mismatches: sum.mismatches, history_rewrites: sum.history_rewrites,
    checked: sum.checked, first_mismatch: sum.first_mismatch });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "check-chat-tokens-"));
  try {
    const run = async (name, trajs) => {
      const file = path.join(dir, `${name}.jsonl`);
      fs.writeFileSync(file, trajs.map((t) => JSON.stringify(t)).join("\n") + "\n");
      return checkTrajectories(ref, { ...o, mode: "trajectories" }, file);
    };
    const clean = await run("clean", fixture(ref));
    expect("clean trajectories pass", clean, clean.mismatches === 0 && clean.checked === 3 && clean.skipped === 1 && clean.full_checked === 1);
    const bad = fixture(ref);
    const first = bad[0].observation_tokens, p = Math.floor(bad[0].action_ranges[0][0] / 2);
    first[p] = first[p] === 0 ? 1 : first[p] - 1;
    const prompt = await run("corrupt-prompt", bad);
    expect("a corrupt prompt token fails", prompt, prompt.prompt_mismatches === 3 && prompt.full_mismatches === 1 && prompt.first_mismatch.position === p);
    const ended = fixture(ref), [, end] = ended[2].action_ranges[1]; // the last action: no history follows it
    ended[2].observation_tokens[end - 1] = [...ref.specialIds].find((id) => id !== ref.eot && !ref.eosIds.has(id));
    const eot = await run("corrupt-end-of-turn", ended);
    expect("a wrong end-of-turn fails", eot, eot.eot_mismatches === 1 && eot.first_mismatch.check === "end_of_turn");
    const other = ended[2].observation_tokens[end - 1];
    ref.eosIds.add(other); // as --eos-ids would: Qwen3's <|endoftext|> is an eos of generation_config.json only
    const eos = await run("eos-ended", ended);
    ref.eosIds.delete(other);
    expect("an eos id ends an action", eos, eos.mismatches === 0 && eos.eos_ended === 1);
    const toolTurn = [{ role: "user", content: "u" }, { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function",
      function: { name: "get_weather", arguments: "{}" } }] }, { role: "tool", tool_call_id: "c", content: "{}" }];
    let refuses = null; // Gemma 3's template allows only alternating user and assistant messages
    try { ref.render(forTemplate(ref, toolTurn), { tools: [WEATHER_TOOL], agp: true }); } catch (e) { refuses = `the template refuses tool messages: ${e.message}`; }
    if (refuses) results.push({ name: "gateway calls", ok: true, skipped: refuses });
    for (const corrupt of refuses ? [] : [false, true]) {
      const server = fakeGateway(ref, corrupt).listen(0, "127.0.0.1");
      await new Promise((r) => server.once("listening", r));
      const sum = await checkGateway(ref, { ...o, mode: "gateway", url: `http://127.0.0.1:${server.address().port}`, model: "m", sessions: 2 })
        .finally(() => server.close());
      expect(corrupt ? "a short gateway prompt fails" : "gateway calls pass", sum,
        sum.calls_checked === 6 && (corrupt ? sum.prompt_mismatches === 6 : sum.mismatches === 0 && sum.eot_checked === 6));
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const failed = results.filter((r) => !r.ok).length;
  return { model: path.basename(path.resolve(o.modelDir)), mode: "selftest", checked: results.length, mismatches: failed,
    end_of_turn_id: ref.eot, eos_ids: [...ref.eosIds], results };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const ref = new Reference(o);
  let sum;
  if (o.mode === "trajectories") sum = await checkTrajectories(ref, o, o.args[0]);
  else if (o.mode === "gateway") sum = await checkGateway(ref, o);
  else if (o.mode === "responses") sum = await checkResponses(ref, o);
  else sum = await selftest(ref, o);
  process.stdout.write(JSON.stringify(sum) + "\n");
  process.exit(sum.mismatches > 0 || sum.checked === 0 ? 1 : 0);
}

main().catch((e) => {
  process.stderr.write(`check-chat-tokens: ${e.stack || e}\n`);
  process.exit(1);
});
