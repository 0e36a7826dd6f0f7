// Renders chat template cases with the reference: @lenml/tokenizers'
// apply_chat_template (transformers.js's context: messages,
// add_generation_prompt, tools, documents, special tokens, extra kwargs),
// its templates compiled by @huggingface/jinja, the engine transformers.js
// uses now (the copy bundled in @lenml/tokenizers is too old to parse the
// Qwen3 and Gemma 3 templates).
//
// Usage: node reference.cjs NODE_DIR < cases.json > rendered.json
//   NODE_DIR holds node_modules with both packages (scripts/fetch-tokenizers.sh).
//   cases.json: {"now": "RFC 3339", "models": {name: tokenizer directory},
//                "cases": [{"model", "messages", "add_generation_prompt",
//                           "tools", "documents", "kwargs", "chat_template"?}]}
//   (chat_template, if given, replaces the model's template)
//   rendered.json: [{"text": "..."} or {"error": "..."}], one per case.
"use strict";
const fs = require("fs");
const path = require("path");

const nodeDir = process.argv[2];
const need = (name) => require(require.resolve(name, { paths: [nodeDir] }));
const { TokenizerLoader } = need("@lenml/tokenizers");
const { Template } = need("@huggingface/jinja");

const input = JSON.parse(fs.readFileSync(0, "utf8"));

// strftime_now reads the clock through new Date(); fix it to input.now so
// renderings are repeatable (the reference's own strftime formats it).
const fixed = new Date(input.now).getTime();
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(fixed);
    else super(...args);
  }
};

const tokenizers = new Map();
function tokenizerFor(model) {
  let tok = tokenizers.get(model);
  if (tok) return tok;
  const dir = input.models[model];
  const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
  tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: read("tokenizer.json"),
    tokenizerConfig: read("tokenizer_config.json"),
  });
  tokenizers.set(model, tok);
  return tok;
}

const out = input.cases.map((c) => {
  try {
    const tok = tokenizerFor(c.model);
    const source = c.chat_template ?? tok.get_chat_template({ tools: c.tools ?? null });
    if (!tok._compiled_template_cache.has(source)) {
      tok._compiled_template_cache.set(source, new Template(source));
    }
    const text = tok.apply_chat_template(c.messages, {
      tokenize: false,
      chat_template: source,
      add_generation_prompt: c.add_generation_prompt,
      tools: c.tools ?? null,
      documents: c.documents ?? null,
      ...(c.kwargs ?? {}),
    });
    return { text };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(out));
