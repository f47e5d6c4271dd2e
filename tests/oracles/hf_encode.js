// Oracle for tests/engine/tokenizer/hf: runs Hugging Face `tokenizers` (the Rust library's Node
// binding, pinned in package.json) on a batch of strings and prints the results as JSON.
//   node hf_encode.js <tokenizer.json> <input.json> <output.json>
// input.json: {"texts": [...], "special_texts": [...]} (special_texts: also encoded with
// add_special and in the "special tokens are text" mode). output.json:
//   {"plain": [ids...] per text (add_special false),
//    "decoded": decode(plain ids, skipSpecial false) per text,
//    "special": [ids...] per special_text (add_special true),
//    "as_text": [ids...] per special_text with special added tokens treated as text (the
//               binding has no encode_special_tokens: their content is replaced by text that
//               cannot occur, keeping every id where it was; removing them would renumber
//               the tokens after them)}
'use strict';
const fs = require('fs');
const path = require('path');
const {Tokenizer} = require(path.join(__dirname, 'node_modules', 'tokenizers'));

async function main() {
  const [tokPath, inPath, outPath] = process.argv.slice(2);
  const json = fs.readFileSync(tokPath, 'utf8');
  const input = JSON.parse(fs.readFileSync(inPath, 'utf8'));
  const tok = Tokenizer.fromString(json);
  const parsed = JSON.parse(json);
  const vocab = parsed.model.vocab;
  for (const t of parsed.added_tokens || []) {
    if (!t.special) continue;
    const hidden = '\u0000\u0001never-in-text-' + t.id + '\u0001\u0000';
    if (vocab[t.content] === t.id) {  // the model knows it too: same id under the new name
      delete vocab[t.content];
      vocab[hidden] = t.id;
    }
    t.content = hidden;
  }
  const noSpecial = Tokenizer.fromString(JSON.stringify(parsed));
  const ids = async (t, texts, add) =>
      (await t.encodeBatch(texts, {addSpecialTokens: add})).map((e) => Array.from(e.getIds()));
  const out = {};
  out.plain = await ids(tok, input.texts, false);
  out.decoded = await tok.decodeBatch(out.plain, false);
  out.special = await ids(tok, input.special_texts, true);
  out.as_text = await ids(noSpecial, input.special_texts, false);
  fs.writeFileSync(outPath, JSON.stringify(out));
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
