#!/usr/bin/env bash
# tessera cntrl preprocess end to end on a hand-made story set and a small ConceptNet file: the three
# JSONL files of MEGATRON-CNTRL's learned stages, one line per story sentence after the first, with RAKE
# keywords, retrieved knowledge, one pseudo-positive and the generator's top knowledge; errors name the
# flag or the file and line.
set -uo pipefail
tessera=${1:?usage: cntrl_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
cat >"$work/stories.csv" <<'CSV'
storyid,storytitle,sentence1,sentence2,sentence3,sentence4,sentence5
a1,Bread,Tom was hungry.,He went to the bakery and bought fresh bread.,His dog wanted the bread too.,Tom shared it.,They were both happy.
a2,"Car, old",Ann had an old car.,The car broke down on the highway.,She called a mechanic.,He fixed the engine quickly.,Ann drove home.
CSV
printf '%s\n' $'/a/1\t/r/AtLocation\t/c/en/bread\t/c/en/bakery\t{}' $'/a/2\t/r/UsedFor\t/c/en/car/n\t/c/en/driving\t{}' \
  $'/a/3\t/r/Desires\t/c/en/dog\t/c/en/bread\t{}' $'/a/4\t/r/IsA\t/c/fr/pain\t/c/en/bread\t{}' \
  $'/a/5\t/r/HasA\t/c/en/car\t/c/en/engine\t{}' $'/a/6\t/r/CapableOf\t/c/en/mechanic\t/c/en/fix_car\t{}' >"$work/kb.csv"
out=$("$tessera" cntrl preprocess --stories "$work/stories.csv" --knowledge-base "$work/kb.csv" \
  --output-prefix "$work/cntrl" --top-n 2 2>&1)
rc=$?
check "cntrl preprocess exits 0: $out" $rc
grep -qF "2 stories, 5 triples: 8 sentences" <<<"$out"
check "it counts stories, English triples and sentences: $out" $?
python3 - "$work/cntrl" <<'PY'
import json, sys
p = sys.argv[1]
kw = [json.loads(l) for l in open(p + "_keywords.jsonl")]
rk = [json.loads(l) for l in open(p + "_ranker.jsonl")]
gen = [json.loads(l) for l in open(p + "_generator.jsonl")]
assert len(kw) == len(rk) == len(gen) == 8, (len(kw), len(rk), len(gen))
assert kw[0]["context"] == "Tom was hungry." and "bought fresh bread" in kw[0]["keywords"], kw[0]
assert gen[0]["target"] == "He went to the bakery and bought fresh bread.", gen[0]
assert "bread is at bakery" in rk[0]["knowledge"], rk[0]
for i in range(len(rk)):
    r, g = rk[i], gen[i]
    assert len(r["pseudo_labels"]) == len(r["knowledge"]) and sum(r["pseudo_labels"]) == min(1, len(r["knowledge"])), r
    assert len(g["knowledge_topN"]) == min(2, len(r["knowledge"])), g
    if r["knowledge"]:
        assert r["knowledge"][r["pseudo_labels"].index(1)] == g["knowledge_topN"][0], (r, g)
assert gen[4]["context"] == "Ann had an old car." and "car has engine" in rk[4]["knowledge"], (gen[4], rk[4])
PY
check "the three JSONL files: keywords, knowledge with one pseudo-positive, the generator's top-2" $?
expect_failure "--stories=$work/none.csv: cannot open the file" "$tessera" cntrl preprocess --stories "$work/none.csv" \
  --knowledge-base "$work/kb.csv" --output-prefix "$work/x"
printf 'only\ttwo\n' >"$work/bad.csv"
expect_failure "bad.csv:1: 2 tab-separated fields" "$tessera" cntrl preprocess --stories "$work/stories.csv" \
  --knowledge-base "$work/bad.csv" --output-prefix "$work/x"
expect_failure "--top-n" "$tessera" cntrl preprocess --stories "$work/stories.csv" --knowledge-base "$work/kb.csv" \
  --output-prefix "$work/x" --top-n 0
# `tessera cntrl --help` prints the usage (it was "error: usage" and exit 1); an unknown subcommand is named.
out=$("$tessera" cntrl --help 2>&1)
[ $? -eq 0 ] && grep -q "cntrl preprocess" <<<"$out" && grep -q "cntrl generate" <<<"$out"
check "cntrl --help prints both subcommands and exits 0: $out" $?
expect_failure "tessera cntrl: unknown subcommand 'preproces'" "$tessera" cntrl preproces --stories x

finish cntrl_cli
