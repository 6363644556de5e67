#!/usr/bin/env bash
# tessera tokenizer train --model-type wordpiece writes a vocab.txt that tessera tokenize then uses with
# --tokenizer-type BertWordPieceLowerCase / BertWordPieceCase; flag errors name the flag.
set -uo pipefail
tessera=${1:?usage: wordpiece_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"

# WikiText's first 100 KB (checked in, checksummed): a corpus that does not change with the documentation.
corpus="$work/corpus.txt"
head -c 100000 "$root/data/eval/wiki.valid.tokens" > "$corpus"
"$tessera" tokenizer train --model-type wordpiece --input "$corpus" --model-prefix "$work/uncased" \
  --vocab-size 1500 > "$work/out.txt" 2>&1
ok=$?; check "tokenizer train --model-type wordpiece exits 0: $(cat "$work/out.txt")" $ok
[ "$(wc -l < "$work/uncased-vocab.txt")" -eq 1500 ] && [ "$(head -5 "$work/uncased-vocab.txt" | tr '\n' ' ')" = "[PAD] [UNK] [CLS] [SEP] [MASK] " ]
check "1500 pieces, the specials first" $?
"$tessera" tokenizer train --model-type wordpiece --cased --input "$corpus" --model-prefix "$work/cased" \
  --vocab-size 1500 > /dev/null 2>&1
check "--cased trains too" $?
grep -qx "The" "$work/cased-vocab.txt" && ! grep -qx "The" "$work/uncased-vocab.txt"
check "the cased vocabulary keeps capitals, the uncased one has none" $?

printf 'The jury said [MASK] it.\nCafé naïve\n' > "$work/text.txt"
"$tessera" tokenize --tokenizer-type BertWordPieceLowerCase --vocab-file "$work/uncased-vocab.txt" \
  < "$work/text.txt" > "$work/ids.txt"
check "tokenize with BertWordPieceLowerCase exits 0" $?
[ "$(wc -l < "$work/ids.txt")" -eq 2 ] && grep -qw 4 "$work/ids.txt"
ok=$?; check "two lines of ids, [MASK] (id 4) kept whole: $(cat "$work/ids.txt")" $ok
"$tessera" tokenize --decode --tokenizer-type BertWordPieceLowerCase --vocab-file "$work/uncased-vocab.txt" \
  < "$work/ids.txt" > "$work/back.txt"
check "tokenize --decode exits 0" $?
head -1 "$work/back.txt" | grep -q '^the jury said \[MASK\] it\.$'
ok=$?; check "decodes to lowercased text: $(head -1 "$work/back.txt")" $ok

"$tessera" tokenize --tokenizer-type BertWordPieceCase < "$work/text.txt" > "$work/err.txt" 2>&1
[ $? -ne 0 ] && grep -q -- "--vocab-file" "$work/err.txt"
ok=$?; check "a missing --vocab-file is an error naming it: $(cat "$work/err.txt")" $ok
"$tessera" tokenizer train --model-type wordpiece --input "$corpus" --model-prefix "$work/x" --byte-fallback \
  > "$work/err.txt" 2>&1
[ $? -ne 0 ] && grep -q -- "--byte-fallback" "$work/err.txt"
ok=$?; check "a SentencePiece flag with wordpiece is an error naming it: $(cat "$work/err.txt")" $ok
"$tessera" tokenizer train --model-type word --input "$corpus" --model-prefix "$work/x" > "$work/err.txt" 2>&1
[ $? -ne 0 ] && grep -q "bpe, unigram or wordpiece" "$work/err.txt"
ok=$?; check "an unknown --model-type names the choices: $(cat "$work/err.txt")" $ok

# `tessera tokenizer --help` prints the usage (exit 0); a misspelled subcommand is named.
out=$("$tessera" tokenizer --help 2>&1)
[ $? -eq 0 ] && grep -q "usage: tessera tokenizer train" <<<"$out"
check "tokenizer --help prints the usage and exits 0: $out" $?
expect_failure "tessera tokenizer: unknown subcommand 'tran' (the subcommand is train)" "$tessera" tokenizer tran \
  --input x
# Fewer pieces than --vocab-size (a small input runs out of pairs to merge) is said, with both numbers.
printf 'a b c\nab bc\n' > "$work/tiny.txt"
out=$("$tessera" tokenizer train --model-type wordpiece --input "$work/tiny.txt" --model-prefix "$work/tiny" \
      --vocab-size 5000 2>&1)
pieces=$(wc -l < "$work/tiny-vocab.txt")
[ "$pieces" -lt 5000 ] && grep -qF "has $pieces pieces, fewer than --vocab-size 5000" <<<"$out"
check "a vocabulary short of --vocab-size is warned about with both numbers: $out" $?

finish wordpiece_cli
