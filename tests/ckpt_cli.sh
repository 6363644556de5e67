#!/usr/bin/env bash
# Checkpoint robustness as a user meets it: --exit-signal-handler saves and exits 0 on SIGTERM,
# --ckpt-keep-last prunes, a crash injected mid-save leaves the previous checkpoint loadable, and a
# corrupted file is named with the damaged tensor.
set -uo pipefail
tessera=${1:?usage: ckpt_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
model="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0"

# SIGTERM during a long run: the iteration finishes, a checkpoint is saved, the exit status is 0.
"$tessera" train $model --train-iters 100000 --save "$work/sig" --exit-signal-handler >"$work/sig.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "iteration        3/" "$work/sig.log" && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM with --exit-signal-handler exits 0 (rc=$rc): $(tail -3 "$work/sig.log")" $rc
grep -q "exiting program after receiving SIGTERM" "$work/sig.log"
rc=$?
check "the log says why it stopped: $(tail -3 "$work/sig.log")" $rc
it=$(cat "$work/sig/latest_checkpointed_iteration.txt" 2>/dev/null)
[ -n "$it" ] && [ "$it" -ge 3 ] && [ -f "$work/sig/$(printf 'iter_%07d' "$it")/index.json" ]
check "a checkpoint of the last iteration ($it) was saved" $?
out=$("$tessera" train $model --train-iters $((it + 1)) --load "$work/sig" 2>&1)
check "resume after the signal: $out" $?
grep -qF "iteration $(printf '%8d' $((it + 1)))/" <<<"$out"
check "resume continues at iteration $((it + 1)): $out" $?

# --ckpt-keep-last 2 with a checkpoint every iteration.
out=$("$tessera" train $model --train-iters 5 --save "$work/keep" --save-interval 1 --ckpt-keep-last 2 2>&1)
check "training with --ckpt-keep-last: $out" $?
[ "$(ls -d "$work/keep"/iter_* | xargs -n1 basename | tr '\n' ' ')" = "iter_0000004 iter_0000005 " ]
rc=$?
check "--ckpt-keep-last 2 keeps iterations 4 and 5: $(ls "$work/keep")" $rc
expect_bad=$("$tessera" train $model --train-iters 5 --ckpt-keep-last -1 2>&1)
grep -qF -- "--ckpt-keep-last" <<<"$expect_bad"
check "--ckpt-keep-last -1 is refused: $expect_bad" $?

# A crash in the middle of the save of iteration 4 (after the model file, before the index).
"$tessera" train $model --train-iters 2 --save "$work/crash" >/dev/null 2>&1
TESSERA_CKPT_CRASH_DURING_SAVE=1 "$tessera" train $model --train-iters 4 --load "$work/crash" --save "$work/crash" \
  >"$work/crash.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "aborting mid-save" "$work/crash.log" && [ -d "$work/crash/iter_0000004.tmp" ]
check "the injected crash happened mid-save (rc=$rc)" $?
[ "$(cat "$work/crash/latest_checkpointed_iteration.txt")" = 2 ]
check "the tracker still names iteration 2" $?
out=$("$tessera" train $model --train-iters 3 --load "$work/crash" 2>&1)
check "the previous checkpoint loads after the crash: $out" $?
grep -q "loaded checkpoint from $work/crash at iteration 2" <<<"$out"
check "resumed from iteration 2: $out" $?
cp -r "$work/crash" "$work/crash-resaved"
"$tessera" train $model --train-iters 3 --load "$work/crash-resaved" --save "$work/crash-resaved" >/dev/null 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(ls "$work/crash-resaved" | tr '\n' ' ')" = "iter_0000002 iter_0000003 latest_checkpointed_iteration.txt " ]
check "the next save removes the killed save's iter_0000004.tmp (without --ckpt-keep-last): $(ls "$work/crash-resaved")" $?

# One flipped bit in a tensor: the file and the tensor are named.
ckpt_file="$work/crash/iter_0000002/model.tp00.pp00.safetensors"
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-3, 2); b = f.read(1); f.seek(-3, 2); f.write(bytes([b[0] ^ 0x10]))' "$ckpt_file"
out=$("$tessera" train $model --train-iters 3 --load "$work/crash" 2>&1)
[ $? -ne 0 ] && grep -qF "$ckpt_file is corrupt" <<<"$out" && grep -q "damaged tensor(s): " <<<"$out"
check "a corrupted file is detected and named with its tensor: $out" $?

# --no-save-optim: the weights alone; resuming then needs --no-load-optim (or --finetune), as in Megatron.
"$tessera" train $model --train-iters 2 --save "$work/weights" --no-save-optim >/dev/null 2>&1
check "--no-save-optim saves" $?
grep -q '"has_optimizer": false' "$work/weights/iter_0000002/index.json"
check "the index says it holds no optimizer state" $?
expect_failure "holds no optimizer state (use --no-load-optim or --finetune)" \
  "$tessera" train $model --train-iters 3 --load "$work/weights"
out=$("$tessera" train $model --train-iters 3 --load "$work/weights" --no-load-optim 2>&1)
check "it resumes with --no-load-optim: $out" $?

# --exit-on-missing-checkpoint: a --load with no checkpoint stops before training instead of starting over.
expect_failure "--load=$work/typo: no checkpoint there (no latest_checkpointed_iteration.txt), and --exit-on-missing-checkpoint is set" \
  "$tessera" train $model --train-iters 1 --load "$work/typo" --exit-on-missing-checkpoint
out=$("$tessera" train $model --train-iters 1 --load "$work/typo" 2>&1)
[ $? -eq 0 ] && grep -q "WARNING: no checkpoint in $work/typo; training from random initialisation" <<<"$out"
check "without it, a warning and a fresh start: $out" $?

finish ckpt_cli
