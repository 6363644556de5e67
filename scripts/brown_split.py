#!/usr/bin/python3
"""Puts a jsonl corpus's documents in a fixed random order and writes the training documents' text.

usage: brown_split.py IN.jsonl OUT.jsonl TRAIN.txt [--train-percent 98] [--seed 1234]

Megatron's --split takes documents in file order, and Brown's files go genre by genre, so the last 2%
would be humour only; shuffled, the held-out documents span the genres. TRAIN.txt holds the text of the
documents --split 98,... trains on (the first round(0.98 n), as Megatron rounds), one paragraph per
line, for `tessera tokenizer train`: the tokenizer never sees the validation text.
"""
import argparse
import json
import os
import random


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("train_text")
    p.add_argument("--train-percent", type=float, default=98)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    with open(args.input, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    random.Random(args.seed).shuffle(lines)
    train = lines[: round(len(lines) * args.train_percent / 100)]
    for path, text in ((args.output, "".join(l + "\n" for l in lines)),
                       (args.train_text, "".join(json.loads(l)["text"] + "\n" for l in train))):
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    print(f"{args.output}: {len(lines)} documents in a fixed random order; {args.train_text}: the first {len(train)}")


if __name__ == "__main__":
    main()
