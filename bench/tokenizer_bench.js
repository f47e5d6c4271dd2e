// The Node side of bench/compare_tokenizers.sh: Hugging Face `tokenizers` (tests/oracles) on the
// same file as flatstate-tokenizer-bench. Times (best of N): Tokenizer.fromFile; encode of every
// line one call at a time (await each: the binding's per-call cost included); encodeBatch of all
// lines in one call (RAYON_NUM_THREADS decides its threads); decodeBatch of the ids.
//   node bench/tokenizer_bench.js <tokenizer.json> <text file> [repetitions]
'use strict';
const fs = require('fs');
const path = require('path');
const {Tokenizer} =
    require(path.join(__dirname, '..', 'tests', 'oracles', 'node_modules', 'tokenizers'));

async function main() {
  const [tokPath, textPath, repsArg] = process.argv.slice(2);
  const reps = Math.max(1, parseInt(repsArg || '3', 10));
  let t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const text = fs.readFileSync(textPath, 'utf8');
  const lines = text.match(/[^\n]*\n|[^\n]+$/g) || [];
  const bytes = Buffer.byteLength(text, 'utf8');
  let one = Infinity, batch = Infinity, dec = Infinity, tokens = 0;
  for (let r = 0; r < reps; ++r) {
    t0 = process.hrtime.bigint();
    tokens = 0;
    for (const l of lines) tokens += (await tok.encode(l, null, {addSpecialTokens: false})).getIds().length;
    one = Math.min(one, Number(process.hrtime.bigint() - t0) / 1e9);
    t0 = process.hrtime.bigint();
    const encs = await tok.encodeBatch(lines, {addSpecialTokens: false});
    batch = Math.min(batch, Number(process.hrtime.bigint() - t0) / 1e9);
    const ids = encs.map((e) => Array.from(e.getIds()));
    t0 = process.hrtime.bigint();
    await tok.decodeBatch(ids, false);
    dec = Math.min(dec, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(`load_ms=${loadMs.toFixed(1)} lines=${lines.length} bytes=${bytes} tokens=${tokens} ` +
              `encode_s=${one.toFixed(3)} encode_MBps=${(bytes / one / 1e6).toFixed(2)} ` +
              `encodeBatch_s=${batch.toFixed(3)} encodeBatch_MBps=${(bytes / batch / 1e6).toFixed(2)} ` +
              `decodeBatch_s=${dec.toFixed(3)} decode_tokps=${(tokens / dec).toFixed(0)} (best of ${reps})`);
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
