#!/usr/bin/env python3
"""Pads a SentencePiece BPE model to a vocabulary size by appending pieces no merge reaches
("\u2581padN", NORMAL, below every score), so a random-weight checkpoint
can carry Qwen3.5's 248,320-row embedding while llama.cpp's converter and flatstate still read a
real tokenizer. Encoding never produces the new pieces; ids below the old size are unchanged.
  /usr/bin/python3 pad_vocab.py <in tokenizer.model> <vocab size> <out folder>
"""
import os
import sys

from sentencepiece import sentencepiece_model_pb2 as pb


def main():
    src, size, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    m = pb.ModelProto()
    with open(src, "rb") as f:
        m.ParseFromString(f.read())
    low = min(p.score for p in m.pieces) - 1.0
    have = {p.piece for p in m.pieces}
    n = 0
    while len(m.pieces) < size:
        piece = f"\u2581pad{n}"
        n += 1
        if piece in have:
            continue
        p = m.pieces.add()
        p.piece, p.score, p.type = piece, low, pb.ModelProto.SentencePiece.NORMAL
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(m.SerializeToString())
    print(f"{len(m.pieces)} pieces -> {out}/tokenizer.model")


if __name__ == "__main__":
    main()
