#!/usr/bin/env bash
# Megatron's OptimizerParamScheduler beyond the learning rate's decay: --weight-decay-incr-style linear or
# cosine (the weight decay of each step from --start-weight-decay to --end-weight-decay) and
# --lr-warmup-init. Each is checked against runs that cannot share its mistakes: iteration-based runs of
# one constant weight decay (or one learning rate) each, resumed one from the other, that make the same
# steps; and a run with the schedule off must differ (so that the check can fail).
set -uo pipefail
tessera=${1:?usage: optimizer_schedule_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1

model="--mock-data --tokenizer-type NullTokenizer --vocab-size 64 --num-layers 2 --hidden-size 32
       --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --eval-iters 0
       --log-interval 1"
losses() { grep -o 'lm loss: [0-9.E+-]*' <<<"$1" | awk '{print $3}' | tr '\n' ' '; }
# compare "what" A B same|differ: the values within 1e-6 relative of each other, or not all
compare() {
  python3 - "$2" "$3" "$4" <<'PY'
import sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
same = len(a) == len(b) and len(a) > 0 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b))
sys.exit(0 if same == (sys.argv[3] == "same") else 1)
PY
  check "$1: ($3) and ($2) should be the $4" $?
}
# chain "flags of every run" "per-run flags" ...: run k trains iteration k with its own flags, resuming
# run k-1's checkpoint; prints the losses of all.
chain() {
  local common=$1 out all="" k=0 previous=""
  shift
  for flags in "$@"; do
    k=$((k + 1))
    out=$("$tessera" train $model $common $flags --train-iters $k ${previous:+--load "$previous"} \
      --save "$work/chain$k" 2>&1) || { echo "chain run $k failed: $out" >&2; return 1; }
    all+=$(losses "$(grep ' iteration ' <<<"$out")")
    previous="$work/chain$k"
  done
  echo "$all"
}

# A linear weight decay from 0 to 0.5 over the run's 5 iterations: its steps decay by 0, 0.1, 0.2, 0.3 and
# 0.4 (the loss of iteration k comes before its update, so the 5 losses see the first four).
constant_lr="--lr 1e-2 --lr-decay-style constant"
scheduled=$("$tessera" train $model $constant_lr --train-iters 5 --weight-decay-incr-style linear \
  --start-weight-decay 0 --end-weight-decay 0.5 2>&1)
check "linear weight-decay run exits 0: $scheduled" $?
rm -rf "$work"/chain*
steps=$(chain "$constant_lr" "--weight-decay 0" "--weight-decay 0.1" "--weight-decay 0.2" "--weight-decay 0.3" \
  "--weight-decay 0.4")
check "constant weight-decay chain runs" $?
compare "linear weight decay against constant steps of 0, 0.1, 0.2, 0.3, 0.4" "$steps" "$(losses "$scheduled")" same
compare "linear weight decay against a constant 0.25" "$(losses "$("$tessera" train $model $constant_lr \
  --train-iters 5 --weight-decay 0.25 2>&1)")" "$(losses "$scheduled")" differ

# Cosine: 0.5 (cos(pi (1 - k/5)) + 1) of the way from 0.1 to 0.3 at step k.
cosine=$("$tessera" train $model $constant_lr --train-iters 5 --weight-decay-incr-style cosine \
  --start-weight-decay 0.1 --end-weight-decay 0.3 2>&1)
check "cosine weight-decay run exits 0: $cosine" $?
rm -rf "$work"/chain*
wds=$(python3 -c "import math; print(' '.join('%.9g' % (0.1 + 0.2 * 0.5 * (math.cos(math.pi * (1 - k / 5)) + 1)) for k in range(5)))")
read -r -a wd <<<"$wds"
steps=$(chain "$constant_lr" "--weight-decay ${wd[0]}" "--weight-decay ${wd[1]}" "--weight-decay ${wd[2]}" \
  "--weight-decay ${wd[3]}" "--weight-decay ${wd[4]}")
compare "cosine weight decay against constant steps of $wds" "$steps" "$(losses "$cosine")" same

# --lr-warmup-init: a warm-up of 4 iterations from 2e-3 to 1e-2 trains with 2e-3, 4e-3, 6e-3, 8e-3, 1e-2.
warm=$("$tessera" train $model --lr 1e-2 --lr-warmup-iters 4 --lr-warmup-init 2e-3 --lr-decay-style constant \
  --train-iters 5 2>&1)
check "warm-up from --lr-warmup-init exits 0: $warm" $?
lrs=$(grep -o 'learning rate: [0-9.E+-]*' <<<"$warm" | awk '{printf "%g ", $3}')
[ "$lrs" = "0.002 0.004 0.006 0.008 0.01 " ]
check "learning rates from --lr-warmup-init 2e-3 should be 0.002 0.004 0.006 0.008 0.01: $lrs" $?

finish optimizer_schedule_cli
