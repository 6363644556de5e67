#!/usr/bin/python3
"""Precision and recall of sentence boundaries on the Brown corpus, whose source files put one sentence
per line (brown_sentences.jsonl, written by scripts/fetch_brown.sh). Each document's sentences are
joined into running text, split by `tessera split-sentences` (the splitter of preprocess
--split-sentences) and by a naive baseline (a break after every run of . ? ! and closing quotes or
brackets that whitespace follows), and the boundaries found (where a sentence other than a document's
first starts) are compared with the corpus's. Two layouts of the text: "running", every sentence
joined by one space (no help from the layout), and "paragraphs", brown.jsonl's text (a paragraph's
sentences joined by a space, paragraphs by a blank line). "punct. recall" is recall on the boundaries
after a sentence that ends in . ? ! (the rest are headlines and the like, which no punctuation rule
finds), and "punct. F1" combines it with the precision. BENCHMARKS.md ("Sentence splitting") has the figures.

Usage: sentence_split_eval.py [--tessera build/release/tessera] [--cache data-cache]
       [--min-f1 F] [--errors N]
--min-f1: exit 1 when the splitter's F1 on running text falls below F (the CTest's floor).
Exits 77 when brown_sentences.jsonl is missing (run scripts/fetch_brown.sh)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAIVE = re.compile(r"[.?!]+[\"')\]]*\s+(?=\S)")
PUNCT_END = re.compile(r"[.?!][\"')\]]*\s*[\"')\]]*\s*$")
LONE_CLOSERS = re.compile(r"(?:[\"')\]]+ )+")
ONLY_CLOSERS = re.compile(r"[\"')\]]+(?: [\"')\]]+)*")


def layouts(paragraphs):
    return {
        "running": [" ".join(s for p in paragraphs for s in p)],
        "paragraphs": ["\n\n".join(" ".join(p) for p in paragraphs)],
    }


def gold_boundaries(paragraphs, layout):
    """Start offsets of every sentence but the first, and the subset after a punctuated sentence."""
    text, starts, punct, pos = "", set(), set(), 0
    sep_in, sep_par = " ", (" " if layout == "running" else "\n\n")
    prev = None
    for pi, p in enumerate(paragraphs):
        for si, s in enumerate(p):
            if prev is not None:
                text += sep_in if si > 0 else sep_par
                # The corpus puts a bracket or quote that closes a sentence at the start of the next
                # line (`however. ) There`): it is counted with the sentence it closes, as punkt
                # realigns such boundaries.
                # A line of closers alone is the end of the sentence before.
                if ONLY_CLOSERS.fullmatch(s):
                    text += s
                    prev += " " + s
                    continue
                lone = LONE_CLOSERS.match(s)
                at = len(text) + (lone.end() if lone else 0)
                starts.add(at)
                if PUNCT_END.search(prev + (s[: lone.end()] if lone else "")):
                    punct.add(at)
            text += s
            prev = s
    return text, starts, punct


def predicted_boundaries(text, sentences):
    starts, pos = set(), 0
    for i, s in enumerate(sentences):
        s = s.strip()
        at = text.find(s, pos)
        if at < 0:
            raise SystemExit(f"sentence_split_eval: a sentence is not in the text: {s[:80]!r}")
        if i > 0:
            starts.add(at)
        pos = at + len(s)
    return starts


def naive_boundaries(text):
    return {m.end() for m in NAIVE.finditer(text)}


def score(gold, punct, pred):
    tp = len(gold & pred)
    p = tp / len(pred) if pred else 1.0
    r = tp / len(gold) if gold else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    pr = len(punct & pred) / len(punct) if punct else 1.0
    return p, r, f, pr, 2 * p * pr / (p + pr) if p + pr else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build/release/tessera"))
    ap.add_argument("--cache", default=os.environ.get("TESSERA_DATA_CACHE", os.path.join(ROOT, "data-cache")))
    ap.add_argument("--min-f1", type=float)
    ap.add_argument("--errors", type=int, default=0, help="print N missed and N wrong boundaries")
    args = ap.parse_args()
    path = os.path.join(args.cache, "brown", "brown_sentences.jsonl")
    if not os.path.exists(path):
        print(f"SKIPPED: {path} is missing (scripts/fetch_brown.sh writes it)")
        sys.exit(77)
    docs = [json.loads(line)["paragraphs"] for line in open(path)]
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for layout in ("running", "paragraphs"):
            golds = [gold_boundaries(d, layout) for d in docs]
            src, dst = os.path.join(work, f"{layout}.jsonl"), os.path.join(work, f"{layout}_split.jsonl")
            with open(src, "w") as f:
                for text, _, _ in golds:
                    f.write(json.dumps({"text": text}) + "\n")
            subprocess.run([args.tessera, "split-sentences", "--input", src, "--output", dst], check=True,
                           stdout=subprocess.DEVNULL)
            split = [json.loads(line)["text"] for line in open(dst)]
            for method in ("tessera", "naive"):
                gold_all, punct_all, pred_all, n = set(), set(), set(), 0
                errors = []
                for i, (text, gold, punct) in enumerate(golds):
                    pred = predicted_boundaries(text, split[i]) if method == "tessera" else naive_boundaries(text)
                    gold_all |= {(i, b) for b in gold}
                    punct_all |= {(i, b) for b in punct}
                    pred_all |= {(i, b) for b in pred}
                    if method == "tessera" and layout == "running" and args.errors:
                        errors += [("missed", text, b) for b in sorted(punct - pred)]
                        errors += [("wrong", text, b) for b in sorted(pred - gold)]
                results[(method, layout)] = score(gold_all, punct_all, pred_all) + (len(gold_all), len(pred_all))
                for kind in ("missed", "wrong"):
                    for _, text, b in [e for e in errors if e[0] == kind][: args.errors]:
                        print(f"{kind}: ...{text[max(0, b - 50):b]}|{text[b:b + 30]}...")
    print(f"{'splitter':<10}{'layout':<12}{'precision':>10}{'recall':>8}{'F1':>8}{'punct. recall':>15}"
          f"{'punct. F1':>11}{'gold':>8}{'found':>8}")
    for (method, layout), (p, r, f, pr, pf, ng, npred) in results.items():
        print(f"{method:<10}{layout:<12}{p:>10.4f}{r:>8.4f}{f:>8.4f}{pr:>15.4f}{pf:>11.4f}{ng:>8}{npred:>8}")
    if args.min_f1 is not None:
        f1 = results[("tessera", "running")][2]
        if f1 < args.min_f1:
            print(f"FAIL: the splitter's F1 on running Brown text, {f1:.4f}, is below the floor {args.min_f1}")
            sys.exit(1)
        print(f"the splitter's F1 on running Brown text, {f1:.4f}, is at least {args.min_f1}")


if __name__ == "__main__":
    main()
