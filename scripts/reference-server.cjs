#!/usr/bin/env node
// reference-server: a model server rollfleet's Go code did not write. It serves the part of
// vLLM's HTTP API that rollfleet's vllm client uses (GET /health, /v1/models, /metrics; POST
// /tokenize, /detokenize, /v1/completions) with the JavaScript reference implementation of
// Hugging Face tokenizers and chat templates (@lenml/tokenizers, templates compiled by
// @huggingface/jinja: the reference scripts/check-chat-tokens.cjs checks against) behind it.
// Its "model" is a scripted policy: it reads the decoded prompt and answers GuessTheNumber
// by bisection, simple arithmetic questions with their value, anything else with a fixed
// boxed answer, then ends its turn with the template's end-of-turn token.
//
// Usage: reference-server.cjs --model-dir DIR [--listen HOST:PORT] [--served-model-name NAME]
//          [--max-model-len N] [--chat-template FILE]
// Prints "reference-server: listening on http://HOST:PORT" once it accepts connections.
"use strict";
const { loadModel } = require("./chat-reference.cjs");
const crypto = require("crypto"), http = require("http"), path = require("path");

function usage(msg) {
  process.stderr.write(`reference-server: ${msg}
usage: reference-server.cjs --model-dir DIR [--listen HOST:PORT] [--served-model-name NAME] [--max-model-len N] [--chat-template FILE]
`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { listen: "127.0.0.1:8000", maxModelLen: 32768 };
  const flags = { "--model-dir": "modelDir", "--listen": "listen", "--served-model-name": "name", "--max-model-len": "maxModelLen",
    "--chat-template": "chatTemplate" };
  for (let i = 0; i < argv.length; i++) {
    const f = flags[argv[i]];
    if (!f) usage(`unknown argument ${argv[i]}`);
    if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`);
    o[f] = argv[++i];
  }
  if (!o.modelDir) usage("--model-dir is required");
  o.maxModelLen = Number(o.maxModelLen);
  if (!Number.isInteger(o.maxModelLen) || o.maxModelLen <= 0) usage("--max-model-len must be a positive integer");
  const m = /^(.*):(\d+)$/.exec(o.listen);
  if (!m) usage("--listen takes HOST:PORT");
  [o.host, o.port] = [m[1].replace(/^\[|\]$/g, ""), Number(m[2])];
  o.name = o.name || path.basename(path.resolve(o.modelDir));
  return o;
}

// Model is the tokenizer and chat template of --model-dir, loaded as check-chat-tokens.cjs does.
class Model {
  constructor(o) {
    const { tok, Template, json } = loadModel(o.modelDir, o.chatTemplate, usage);
    this.tok = tok;
    this.Template = Template;
    this.vocabSize = this.tok.model.vocab.length;
    this.eos = this.tok.eos_token_id;
    // The end-of-turn id is the token the template writes right after an assistant's text.
    const text = this.render([{ role: "user", content: "u" }, { role: "assistant", content: "XQZ" }], {});
    this.eot = this.encode(text.slice(text.lastIndexOf("XQZ") + 3), false)[0];
    if (!json.added_tokens.some((t) => t.special && t.id === this.eot)) usage(`the template writes no special token after an assistant message`);
  }
  render(messages, { tools = null, agp = false, kwargs = {}, template = null }) {
    const source = this.tok.get_chat_template({ chat_template: template, tools });
    if (!this.tok._compiled_template_cache.has(source)) this.tok._compiled_template_cache.set(source, new this.Template(source));
    return this.tok.apply_chat_template(messages, { ...kwargs, tokenize: false, chat_template: source, tools, add_generation_prompt: agp });
  }
  encode(text, addSpecial) { return Array.from(this.tok.encode(text, { add_special_tokens: addSpecial })); }
  // decode gives a completion's text as vLLM's incremental detokenizer does: without cleaning up
  // tokenization spaces.
  decode(ids, skipSpecial) { return this.tok.decode(ids, { skip_special_tokens: skipSpecial, clean_up_tokenization_spaces: false }); }
}

// ApiError is a request vLLM would refuse, answered in vLLM's error shape.
class ApiError extends Error {
  constructor(status, message, type = status === 404 ? "NotFoundError" : "BadRequestError") {
    super(message);
    Object.assign(this, { status, type });
  }
}
const bad = (msg) => new ApiError(400, msg);

// ---- the scripted policy ----

// guessTheNumber bisects what GuessTheNumber's instructions and feedback leave of the range.
function guessTheNumber(text) {
  const r = /guess the number between (\d+) and (\d+)/i.exec(text);
  let [lo, hi] = r ? [Number(r[1]), Number(r[2])] : [1, 20];
  for (const m of text.matchAll(/you guessed (\d+), and the target number is (higher|lower) than/g)) {
    if (m[2] === "higher") lo = Math.max(lo, Number(m[1]) + 1);
    else hi = Math.min(hi, Number(m[1]) - 1);
  }
  if (lo > hi) [lo, hi] = r ? [Number(r[1]), Number(r[2])] : [1, 20];
  const guess = lo + Math.floor((hi - lo) / 2);
  return `Still possible: ${lo}–${hi}. I guess \\boxed{${guess}}.`;
}

// arithmetic evaluates integers with + - * / and parentheses, or returns null.
function arithmetic(expr) {
  const toks = expr.replace(/×/g, "*").replace(/÷/g, "/").match(/\d+(?:\.\d+)?|[-+*/()]|\S/g) || [];
  let i = 0;
  const atom = () => {
    const t = toks[i++];
    if (t === "(") { const v = sum(); if (toks[i++] !== ")") throw new Error("no )"); return v; }
    if (t === "-") return -atom();
    if (/^\d/.test(t || "")) return Number(t);
    throw new Error(`unexpected ${t}`);
  };
  const product = () => { let v = atom(); while (toks[i] === "*" || toks[i] === "/") v = toks[i++] === "*" ? v * atom() : v / atom(); return v; };
  const sum = () => { let v = product(); while (toks[i] === "+" || toks[i] === "-") v = toks[i++] === "+" ? v + product() : v - product(); return v; };
  try {
    const v = sum();
    return i === toks.length && Number.isFinite(v) ? v : null;
  } catch { return null; }
}

// reply is the policy's answer to a decoded prompt.
function reply(text) {
  if (/guess the number/i.test(text)) return guessTheNumber(text);
  const qs = [...text.matchAll(/what is ([^?\n]+)\?/gi)];
  if (qs.length > 0) {
    const q = qs[qs.length - 1][1].trim(), v = arithmetic(q), a = v === null ? null : +v.toFixed(6);
    if (a !== null) return `We compute ${q} = ${a}.\n\nThe answer is \\boxed{${a}}.`;
    return "The answer is \\boxed{42}.";
  }
  return "My answer: \\boxed{1 1 1}";
}

// ---- the API ----

function checkModel(o, body) {
  if (body.model != null && body.model !== o.name) throw new ApiError(404, `The model \`${body.model}\` does not exist.`);
}

function checkIds(model, ids, what) {
  if (!ids.every((n) => Number.isInteger(n) && n >= 0)) throw bad(`${what} must be a list of non-negative integers`);
  const out = ids.find((n) => n >= model.vocabSize);
  if (out !== undefined) throw bad(`Token id ${out} is out of vocabulary`);
}

// forTemplate gives request messages as vLLM hands them to the template: text parts joined,
// null content "", tool call arguments parsed.
function forTemplate(messages) {
  if (!Array.isArray(messages) || messages.some((m) => !m || typeof m.role !== "string")) throw bad("messages must be a list of objects with a role");
  return messages.map((m) => {
    const c = { ...m };
    if (Array.isArray(m.content)) c.content = m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n");
    else if (m.content == null) c.content = "";
    if (Array.isArray(m.tool_calls)) {
      c.tool_calls = m.tool_calls.map((tc) => {
        const args = tc.function?.arguments;
        try {
          return { ...tc, function: { ...tc.function, arguments: typeof args === "string" ? JSON.parse(args || "{}") : args } };
        } catch (e) { throw bad(`tool call arguments are not JSON: ${e.message}`); }
      });
    }
    return c;
  });
}

// renderChat applies the template as vLLM's /tokenize does for messages.
function renderChat(model, body) {
  const agp = body.add_generation_prompt ?? true, cont = !!body.continue_final_message;
  if (agp && cont) throw bad("Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  const kwargs = body.chat_template_kwargs ?? {};
  if (typeof kwargs !== "object" || Array.isArray(kwargs)) throw bad("chat_template_kwargs must be an object");
  const messages = forTemplate(body.messages);
  let text;
  try {
    text = model.render(messages, { tools: body.tools ?? null, agp, kwargs, template: body.chat_template ?? null });
  } catch (e) { throw bad(`chat template error: ${e.message}`); }
  if (cont) { // as transformers leaves the final message open
    const last = String(messages[messages.length - 1]?.content ?? "");
    const at = text.lastIndexOf(last.trim());
    if (last.trim() === "" || at < 0) throw bad("the final message's content is not in the rendered chat");
    text = text.slice(0, at + (text.startsWith(last.trimStart(), at) ? last.trimStart().length : last.trim().length));
  }
  return text;
}

function tokenize(o, model, body) {
  checkModel(o, body);
  let tokens;
  if (body.messages !== undefined) tokens = model.encode(renderChat(model, body), body.add_special_tokens ?? false);
  else if (typeof body.prompt === "string") tokens = model.encode(body.prompt, body.add_special_tokens ?? true);
  else throw bad("give a prompt string or messages");
  return { count: tokens.length, max_model_len: o.maxModelLen, tokens,
    token_strs: body.return_token_strs ? tokens.map((id) => model.tok.model.vocab[id]) : null };
}

function detokenize(o, model, body) {
  checkModel(o, body);
  if (!Array.isArray(body.tokens)) throw bad("tokens must be a list of token ids");
  checkIds(model, body.tokens, "tokens");
  // transformers' decode with its defaults, as vLLM's /detokenize calls it.
  return { prompt: model.tok.decode(body.tokens) };
}

// promptIds reads a completion's prompt: token ids or text, alone or as a batch of one.
function promptIds(model, prompt) {
  if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === "string" || Array.isArray(prompt[0]))) prompt = prompt[0];
  if (typeof prompt === "string") return model.encode(prompt, true);
  if (!Array.isArray(prompt)) throw bad("prompt must be a string or a list of token ids");
  checkIds(model, prompt, "prompt");
  return prompt;
}

function checkSampling(body) {
  const num = (k, ok, want) => { if (body[k] != null && !(typeof body[k] === "number" && ok(body[k]))) throw bad(`${k} must be ${want}, got ${body[k]}.`); };
  num("temperature", (v) => v >= 0, "non-negative");
  num("top_p", (v) => v > 0 && v <= 1, "in (0, 1]");
  num("min_p", (v) => v >= 0 && v <= 1, "in [0, 1]");
  num("top_k", (v) => Number.isInteger(v) && v >= -1, "-1 (disable), or at least 1");
  num("n", (v) => Number.isInteger(v) && v >= 1, "at least 1");
  num("logprobs", (v) => Number.isInteger(v) && v >= 0 && v <= 20, "between 0 and 20");
  num("seed", Number.isInteger, "an integer");
  if (body.stream) throw bad("this server does not stream");
  const stop = body.stop == null ? [] : [body.stop].flat();
  if (stop.some((s) => typeof s !== "string")) throw bad("stop must be a string or a list of strings");
  const stopIds = body.stop_token_ids ?? [];
  if (!Array.isArray(stopIds) || !stopIds.every(Number.isInteger)) throw bad("stop_token_ids must be a list of integers");
  return { stop, stopIds };
}

// generate plays the policy's reply and ends it as vLLM would: at a stop string (checked on the
// text decoded so far), a stop token, the end-of-turn token (the eos, or a stop token such as
// the eos ids of a generation config), or max_tokens.
function generate(model, prompt, body, maxTokens, { stop, stopIds }) {
  const skip = body.skip_special_tokens ?? true, keepStop = !!body.include_stop_str_in_output;
  const ids = [...model.encode(reply(model.decode(prompt, false)), false), model.eot];
  let n = ids.length, reason = null, text = null;
  for (let i = 0; i < ids.length && reason === null; i++) {
    if (stopIds.includes(ids[i]) || i === ids.length - 1) {
      n = i + 1;
      reason = ids[i] === model.eos ? "eos" : ids[i]; // vLLM looks at the eos before the stop ids
      text = model.decode(ids.slice(0, keepStop ? n : i), skip);
      break;
    }
    const sofar = model.decode(ids.slice(0, i + 1), skip);
    const hit = stop.map((s) => [sofar.indexOf(s), s]).filter(([at]) => at >= 0).sort((a, b) => a[0] - b[0])[0];
    if (hit) [n, reason, text] = [i + 1, hit[1], sofar.slice(0, hit[0] + (keepStop ? hit[1].length : 0))];
  }
  if (n > maxTokens) return { ids: ids.slice(0, maxTokens), text: model.decode(ids.slice(0, maxTokens), skip), finish: "length", stopReason: null };
  return { ids: ids.slice(0, n), text, finish: "stop", stopReason: reason === "eos" ? null : reason };
}

// completionLogprobs has vLLM's completion logprobs shape; text_offset, as vLLM's, adds up the
// lengths of the token strings.
function completionLogprobs(model, ids, asIds) {
  const tokens = ids.map((id) => (asIds ? `token_id:${id}` : model.decode([id], false)));
  const lps = ids.map(() => -0.01);
  const offsets = [];
  tokens.reduce((at, t) => (offsets.push(at), at + t.length), 0);
  return { text_offset: offsets, token_logprobs: lps, tokens, top_logprobs: tokens.map((t, i) => ({ [t]: lps[i] })) };
}

function complete(o, model, body) {
  checkModel(o, body);
  const sampling = checkSampling(body);
  if (body.prompt == null) throw bad("prompt is required");
  const prompt = promptIds(model, body.prompt);
  if (prompt.length === 0) throw bad("The prompt cannot be empty.");
  if (prompt.length >= o.maxModelLen) {
    throw bad(`This model's maximum context length is ${o.maxModelLen} tokens. However, your request has ${prompt.length} input tokens. Please reduce the length of the input messages.`);
  }
  const maxTokens = body.max_tokens ?? o.maxModelLen - prompt.length;
  if (!Number.isInteger(maxTokens) || maxTokens < 1) throw bad(`max_tokens must be at least 1, got ${maxTokens}.`);
  if (prompt.length + maxTokens > o.maxModelLen) {
    throw bad(`'max_tokens' is too large: ${maxTokens}. This model's maximum context length is ${o.maxModelLen} tokens and your request has ${prompt.length} input tokens (${maxTokens} > ${o.maxModelLen} - ${prompt.length}).`);
  }
  const g = generate(model, prompt, body, maxTokens, sampling);
  const choices = Array.from({ length: body.n ?? 1 }, (_, index) => {
    const c = { index, text: g.text, logprobs: body.logprobs == null ? null : completionLogprobs(model, g.ids, !!body.return_tokens_as_token_ids),
      finish_reason: g.finish, stop_reason: g.stopReason, prompt_logprobs: null };
    if (body.return_token_ids) Object.assign(c, { prompt_token_ids: prompt, token_ids: g.ids });
    return c;
  });
  const completion = g.ids.length * choices.length;
  return { id: `cmpl-${crypto.randomBytes(16).toString("hex")}`, object: "text_completion", created: Math.floor(Date.now() / 1000),
    model: o.name, choices, service_tier: null, system_fingerprint: null,
    usage: { prompt_tokens: prompt.length, total_tokens: prompt.length + completion, completion_tokens: completion, prompt_tokens_details: null },
    kv_transfer_params: null };
}

function models(o) {
  const created = Math.floor(Date.now() / 1000);
  return { object: "list", data: [{ id: o.name, object: "model", created, owned_by: "vllm", root: o.name, parent: null,
    max_model_len: o.maxModelLen, permission: [{ id: `modelperm-${crypto.randomBytes(8).toString("hex")}`, object: "model_permission",
      created, allow_create_engine: false, allow_sampling: true, allow_logprobs: true, allow_search_indices: false, allow_view: true,
      allow_fine_tuning: false, organization: "*", group: null, is_blocking: false }] }] };
}

function serve(o, model) {
  let running = 0;
  const posts = { "/tokenize": tokenize, "/detokenize": detokenize, "/v1/completions": complete };
  const gets = {
    "/health": () => null,
    "/v1/models": () => models(o),
    // The scheduler gauges rollfleet's adaptive in-flight limit reads.
    "/metrics": () => `# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="${o.name}"} ${running}\n` +
      `# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="${o.name}"} 0\n`,
  };
  return http.createServer((req, res) => {
    const send = (status, v) => {
      const text = typeof v === "string";
      res.writeHead(status, { "Content-Type": text ? "text/plain; version=0.0.4" : "application/json" });
      res.end(v === null ? "" : text ? v : JSON.stringify(v));
    };
    const fail = (e) => {
      const status = e instanceof ApiError ? e.status : 500;
      send(status, { object: "error", message: e.message, type: e instanceof ApiError ? e.type : "InternalServerError", param: null, code: status });
    };
    const url = req.url.split("?")[0];
    if (req.method === "GET" && gets[url]) return send(200, gets[url]());
    const handler = req.method === "POST" && posts[url];
    if (!handler) return send(gets[url] || posts[url] ? 405 : 404, { detail: gets[url] || posts[url] ? "Method Not Allowed" : "Not Found" });
    const chunks = [];
    running++;
    req.on("data", (d) => chunks.push(d)).on("end", () => {
      try {
        let body;
        try { body = JSON.parse(Buffer.concat(chunks).toString("utf8")); } catch (e) { throw bad(`invalid JSON: ${e.message}`); }
        if (!body || typeof body !== "object" || Array.isArray(body)) throw bad("the body must be a JSON object");
        send(200, handler(o, model, body));
      } catch (e) { fail(e); } finally { running--; }
    });
  });
}

function main() {
  const o = parseArgs(process.argv.slice(2));
  const model = new Model(o);
  const server = serve(o, model);
  server.on("error", (e) => { process.stderr.write(`reference-server: ${e.message}\n`); process.exit(1); });
  server.listen(o.port, o.host, () => {
    const { address, port } = server.address();
    process.stdout.write(`reference-server: listening on http://${address.includes(":") ? `[${address}]` : address}:${port}\n`);
  });
  for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(0));
}

main();
