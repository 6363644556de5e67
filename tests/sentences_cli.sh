#!/usr/bin/env bash
# `tessera preprocess --split-sentences` and `tessera split-sentences` as a user runs them: the
# _sentence dataset with one sequence per sentence and the documents in its index, --keep-newlines,
# --append-eod on a document's last sentence, and Megatron's warning for a BERT tokenizer unsplit.
set -uo pipefail
tessera=${1:?usage: sentences_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
null_tok=(--tokenizer-type NullTokenizer --vocab-size 60)

# NullTokenizer text has no punctuation, so blank lines (paragraphs) are what splits it.
printf '{"text": "1 2 3\\n\\n4 5\\n\\n\\n6"}\n{"text": "  "}\n{"text": "7 8\\n9"}\n' > "$work/docs.jsonl"
for flags in "" "--keep-newlines"; do
  out=$("$tessera" preprocess --input "$work/docs.jsonl" --output-prefix "$work/s" --split-sentences $flags \
        --append-eod --workers 2 "${null_tok[@]}" 2>&1)
  check "preprocess --split-sentences $flags exits 0: $out" $?
  grep -qF "wrote $work/s_text_sentence.bin/.idx" <<<"$out" && grep -qF "2 documents, 4 sentences, 11 tokens" <<<"$out"
  check "preprocess --split-sentences $flags: s_text_sentence, 2 documents of 4 sentences, 11 tokens: $out" $?
done
# The index: sequence lengths 3 2 2 (the last with the end of document), then 4; documents 0 3 4.
python3 - "$work/s_text_sentence.idx" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
s, d = struct.unpack_from("<QQ", b, 18)
lengths = struct.unpack_from(f"<{s}i", b, 34)
docs = struct.unpack_from(f"<{d}q", b, 34 + 12 * s)
sys.exit(0 if (lengths, docs) == ((3, 2, 2, 4), (0, 3, 4)) else f"lengths {lengths}, documents {docs}")
PY
check "the _sentence index should hold sequences 3 2 2 4 and document indices 0 3 4" $?

expect_failure "--keep-newlines: only with --split-sentences" \
  "$tessera" preprocess --input "$work/docs.jsonl" --output-prefix "$work/k" --keep-newlines "${null_tok[@]}"
out=$("$tessera" preprocess --input "$work/docs.jsonl" --output-prefix "$work/b" --tokenizer-type BertWordPieceLowerCase \
      --vocab-file /nonexistent 2>&1)
grep -qF "Are you sure you don't want to split sentences?" <<<"$out"
check "a BERT tokenizer without --split-sentences should be warned about: $out" $?
out=$("$tessera" preprocess --input "$work/docs.jsonl" --output-prefix "$work/b" --tokenizer-type BertWordPieceLowerCase \
      --vocab-file /nonexistent --split-sentences 2>&1)
! grep -qF "Are you sure" <<<"$out"
check "no warning with --split-sentences: $out" $?

# split-sentences: jsonl in, lists of sentences out.
printf '%s\n' '{"text": "Mr. Smith went to Washington, D.C. on Jan. 5. He met J. F. Kennedy! \"Why?\" he asked.", "id": 1}' \
  '{"text": "Line one.\nLine two.\n\n"}' > "$work/en.jsonl"
out=$("$tessera" split-sentences --input "$work/en.jsonl" --output "$work/en_split.jsonl" 2>&1)
check "split-sentences exits 0: $out" $?
expected='{"text":["Mr. Smith went to Washington, D.C. on Jan. 5.","He met J. F. Kennedy!","\"Why?\" he asked."]}
{"text":["Line one.","Line two."]}'
[ "$(cat "$work/en_split.jsonl")" = "$expected" ]
check "split-sentences output: $(cat "$work/en_split.jsonl")" $?
"$tessera" split-sentences --input "$work/en.jsonl" --output "$work/en_keep.jsonl" --keep-newlines >/dev/null 2>&1
[ "$(tail -1 "$work/en_keep.jsonl")" = '{"text":["Line one.\n","Line two."]}' ]
check "split-sentences --keep-newlines keeps the newline after a sentence: $(tail -1 "$work/en_keep.jsonl")" $?
expect_failure "en_bad.jsonl:1: no key \"text\"" bash -c "echo '{\"t\": 1}' > '$work/en_bad.jsonl' &&
  '$tessera' split-sentences --input '$work/en_bad.jsonl' --output '$work/x.jsonl'"
# A malformed line part way leaves the earlier output as it was, with no partial file or temporary.
echo old > "$work/kept.jsonl"
printf '{"text": "One. Two."}\n{"text": 5}\n' > "$work/half_bad.jsonl"
expect_failure "half_bad.jsonl:2: a non-string value" "$tessera" split-sentences --input "$work/half_bad.jsonl" \
  --output "$work/kept.jsonl"
[ "$(cat "$work/kept.jsonl")" = old ] && ! ls "$work"/kept.jsonl.tmp.* >/dev/null 2>&1
check "a failed split-sentences leaves --output untouched: $(ls "$work" | grep kept)" $?

finish sentences_cli
