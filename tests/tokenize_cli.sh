#!/usr/bin/env bash
# tessera tokenize --whole-input: a multi-line file (blank lines, tabs, trailing spaces, non-ASCII
# UTF-8, no final newline) is one text; --decode --whole-input gives it back byte for byte through
# GPT-2's byte-level BPE. Line by line, the newlines are not part of any text.
set -uo pipefail
tessera=${1:?usage: tokenize_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TESSERA_DATA_CACHE:-$root/data-cache}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
gpt2=(--tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json" --merge-file "$cache/gpt2/gpt2-merges.txt")
if [ ! -f "$cache/gpt2/gpt2-vocab.json" ]; then
  echo "FAIL: $cache/gpt2 is missing (scripts/setup.sh downloads GPT-2's vocabulary)"
  exit 1
fi

printf 'The jury said,\n\n\tit was   "fine".  \nCafé – naïve 東京\r\nlast line without newline' > "$work/text.txt"
"$tessera" tokenize --whole-input "${gpt2[@]}" < "$work/text.txt" > "$work/ids.txt"
check "tokenize --whole-input exits 0" $?
[ "$(wc -l < "$work/ids.txt")" -eq 1 ] && grep -qE '^[0-9]+( [0-9]+)*$' "$work/ids.txt"
ok=$?; check "one line of ids: $(cat "$work/ids.txt")" $ok
"$tessera" tokenize --decode --whole-input "${gpt2[@]}" < "$work/ids.txt" > "$work/back.txt"
check "tokenize --decode --whole-input exits 0" $?
cmp "$work/text.txt" "$work/back.txt"
ok=$?; check "the round trip gives the file back byte for byte: $(od -c "$work/back.txt" | head -5)" $ok
# Ids may be split over lines when decoding the whole input.
tr ' ' '\n' < "$work/ids.txt" | "$tessera" tokenize --decode --whole-input "${gpt2[@]}" > "$work/back2.txt"
cmp "$work/text.txt" "$work/back2.txt"
check "ids one per line decode to the same text" $?
# Line by line (the default) the ids of each line stand for that line alone: 5 lines, no id of "\n" (198).
"$tessera" tokenize "${gpt2[@]}" < "$work/text.txt" > "$work/lines.txt"
[ "$(wc -l < "$work/lines.txt")" -eq 5 ] && ! grep -qw 198 "$work/lines.txt"
ok=$?; check "line by line gives 5 lines without newline ids: $(cat "$work/lines.txt")" $ok

# A word that is no id names the line, the word and the tokenizer (not the NullTokenizer that reads ids).
expect_failure "line 2 of stdin: 'x' is not a token id of GPT2BPETokenizer (0..50256)" \
  bash -c '"$0" tokenize --decode "${@}" <<<$'"'"'31373\n1 x 2'"'"'' "$tessera" "${gpt2[@]}"
expect_failure "stdin: '50257' is not a token id of GPT2BPETokenizer" \
  bash -c 'echo 50257 | "$0" tokenize --decode --whole-input "${@}"' "$tessera" "${gpt2[@]}"
# A directory given as the vocabulary is named, not reported as a stream buffer's failure.
mkdir "$work/dir"
expect_failure "cannot read GPT-2 vocab file $work/dir: Is a directory" "$tessera" tokenize \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$work/dir" --merge-file "$cache/gpt2/gpt2-merges.txt"
# The NullTokenizer's --vocab-size is named with its value when negative or beyond 32-bit ids (it wrapped).
expect_failure "--vocab-size=-5: must be positive" "$tessera" tokenize --tokenizer-type NullTokenizer --vocab-size -5
expect_failure "--vocab-size=3000000000: must be positive and below 2^31 - 1" "$tessera" tokenize \
  --tokenizer-type NullTokenizer --vocab-size 3000000000
# As with argparse, a flag given twice takes its last value (CLI11 said "At Most 1 required but received 2").
out=$(echo 6 | "$tessera" tokenize --decode --tokenizer-type NullTokenizer --vocab-size 5 --vocab-size 6 2>&1)
[ "$out" = 6 ]
check "--vocab-size 5 --vocab-size 6 takes 6: $out" $?
# ... and an error names the wrong occurrence's value alone (it read "--vocab-size = 5,x").
out=$(echo 6 | "$tessera" tokenize --decode --tokenizer-type NullTokenizer --vocab-size 5 --vocab-size x 2>&1)
[ $? -ne 0 ] && grep -qF -- "--vocab-size = x" <<<"$out"
check "--vocab-size 5 --vocab-size x names x alone: $out" $?
# A misspelled flag is named, with the nearest one, before the required flag it hides (every command).
expect_failure "unknown flag --tokenizer_type (did you mean --tokenizer-type?)" "$tessera" tokenize \
  --tokenizer_type NullTokenizer --vocab-size 5
expect_failure "unknown flag --vocab-sise (did you mean --vocab-size?)" "$tessera" preprocess --input x.jsonl \
  --output-prefix x --tokenizer-type NullTokenizer --vocab-sise 5
expect_failure "unknown flag --no-such-thing (tessera tokenize --help" "$tessera" tokenize --no-such-thing 1

# The top-level help: `tessera help` prints it (exit 0), and it names what `tokenizer train` and `convert` do.
out=$("$tessera" help 2>&1)
[ $? -eq 0 ] && grep -q "WordPiece" <<<"$out" && grep -q "MixtralForCausalLM" <<<"$out" &&
  grep -q "BertForPreTraining" <<<"$out"
check "tessera help: the commands, WordPiece and the Mixtral and BERT converters: $out" $?

finish tokenize_cli
