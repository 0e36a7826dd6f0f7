// Runs the reference tokenizer (@lenml/tokenizers, a transformers.js fork)
// over a corpus: one JSON string a line in, one JSON object a line out with
// the ids without special tokens (a), with them (b), and the decode of a
// without clean-up (d).
//
//   node reference.mjs MAIN_MJS TOKENIZER_DIR CORPUS_JSONL OUT_JSONL
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [mainMjs, dir, corpusPath, outPath] = process.argv.slice(2);
const { TokenizerLoader } = await import(pathToFileURL(mainMjs).href);
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8")),
});
const lines = readFileSync(corpusPath, "utf8").split("\n").filter((l) => l !== "");
const out = [];
for (const line of lines) {
  const s = JSON.parse(line);
  const a = tok.encode(s, { add_special_tokens: false });
  const b = tok.encode(s, { add_special_tokens: true });
  const d = a.length === 0 ? "" : tok.decode(a, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  out.push(JSON.stringify({ a, b, d }));
}
writeFileSync(outPath, out.join("\n") + "\n");
