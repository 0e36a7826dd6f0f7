// chat-reference: loads a model directory's tokenizer and chat template with the JavaScript
// reference (@lenml/tokenizers, templates compiled by @huggingface/jinja) from the
// node_modules scripts/fetch-tokenizers.sh fills. Shared by check-chat-tokens.cjs and
// reference-server.cjs, so both read a model exactly alike.
"use strict";
const fs = require("fs"), path = require("path");

// need loads a package of the reference; fail reports what is missing and does not return.
function need(name, fail) {
  const base = process.env.ROLLFLEET_TOKENIZERS || path.join(__dirname, "..", ".cache", "tokenizers");
  try {
    return require(require.resolve(name, { paths: [path.join(base, "node")] }));
  } catch (e) {
    fail(`cannot load ${name} from ${path.join(base, "node", "node_modules")} (run scripts/fetch-tokenizers.sh): ${e.message.split("\n")[0]}`);
  }
}

// loadModel reads modelDir's tokenizer.json and tokenizer_config.json, with the chat template
// of chatTemplate when given, else chat_template.jinja beside the config when the config has
// none. It returns the tokenizer, the template engine and tokenizer.json as read.
function loadModel(modelDir, chatTemplate, fail) {
  const { TokenizerLoader } = need("@lenml/tokenizers", fail);
  const Template = need("@huggingface/jinja", fail).Template; // the bundled engine cannot parse Qwen3's or Gemma 3's templates
  const read = (name) => JSON.parse(fs.readFileSync(path.join(modelDir, name), "utf8"));
  const config = read("tokenizer_config.json");
  const jinjaFile = chatTemplate || path.join(modelDir, "chat_template.jinja");
  if (chatTemplate || (!config.chat_template && fs.existsSync(jinjaFile))) config.chat_template = fs.readFileSync(jinjaFile, "utf8");
  if (!config.chat_template) fail(`${modelDir} has no chat template (give --chat-template FILE)`);
  const json = read("tokenizer.json");
  return { tok: TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config }), Template, json };
}

module.exports = { loadModel };
