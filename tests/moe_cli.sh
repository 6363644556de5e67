#!/usr/bin/env bash
# Mixture of experts end to end:
#  * training at expert-parallel size 2 on two ranks logs the load-balancing and z-losses and the expert
#    load (min/max/cv, dropped tokens) in Megatron's log line, and the same losses as one process;
#  * a checkpoint saved at ep 4 (four ranks) resumes at ep 1 (one process) and at ep 2 (two ranks, the
#    local experts grouped: --moe-grouped-gemm) with the uninterrupted run's losses;
#  * greedy generation from it at ep 1 and at ep 2 (two ranks, tp 2, grouped) gives the same tokens, and
#    so does `serve` at ep 2 on two ranks of tp 1 (the experts span the dense layers' replicas);
#  * bad expert layouts are refused before any work, naming the flag.
set -uo pipefail
tessera=${1:?usage: moe_cli.sh path/to/tessera}
work=$(mktemp -d)
source "$(dirname "$0")/lib/checks.sh"
source "$(dirname "$0")/lib/server.sh"
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
mpi() { local n=$1; shift; mpirun --oversubscribe --allow-run-as-root -np "$n" "$@"; }
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3
       --log-interval 2 --eval-iters 0 --seed 7 --make-vocab-size-divisible-by 64 --train-iters 8
       --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3
       --moe-expert-capacity-factor 1.0)

# "iteration lm-loss" per log line.
losses() { grep -oE "iteration +[0-9]+/ +8 .*lm loss: [^|]*" "$1" | sed -E 's/.*iteration +([0-9]+)\/.*lm loss: (.*) /\1 \2/'; }
# Two loss lists agree on their common iterations to 1e-5 relative (layouts differ in float rounding).
same_losses() {
  python3 - "$1" "$2" <<'PY'
import sys
a = dict(l.split() for l in sys.argv[1].splitlines() if l.strip())
b = dict(l.split() for l in sys.argv[2].splitlines() if l.strip())
common = [k for k in a if k in b]
sys.exit(0 if common and all(abs(float(a[k]) - float(b[k])) <= 1e-5 * abs(float(b[k])) for k in common) else 1)
PY
}

"$tessera" train "${model[@]}" >"$work/single.log" 2>&1
check "one process trains: $(tail -3 "$work/single.log")" $?
mpi 2 "$tessera" train "${model[@]}" --expert-model-parallel-size 2 >"$work/ep2.log" 2>&1
check "ep 2 on two ranks trains: $(tail -3 "$work/ep2.log")" $?
line=$(grep -m1 "iteration        2/" "$work/ep2.log")
[[ "$line" =~ "load_balancing_loss: "[0-9.E+-]+" | z_loss: "[0-9.E+-]+" |" ]]
check "the log line has the MoE losses: $line" $?
[[ "$line" =~ "expert load min/max/cv: "[0-9.]+/[0-9.]+/[0-9.]+" | dropped tokens: "[0-9.]+" |" ]]
check "the log line has the expert load and the dropped tokens: $line" $?
same_losses "$(losses "$work/ep2.log")" "$(losses "$work/single.log")"
check "ep 2 gives one process's losses: $(losses "$work/ep2.log") vs $(losses "$work/single.log")" $?

# Saved at ep 4 at iteration 4, resumed at ep 1 and ep 2.
mpi 4 "$tessera" train "${model[@]}" --expert-model-parallel-size 4 --save "$work/ckpt" --exit-interval 4 \
  >"$work/ep4.log" 2>&1
check "ep 4 saves at iteration 4: $(tail -3 "$work/ep4.log")" $?
ls "$work/ckpt/iter_0000004" >/dev/null 2>&1
check "the checkpoint is there: $(ls "$work/ckpt" 2>&1)" $?
"$tessera" train "${model[@]}" --load "$work/ckpt" >"$work/resume1.log" 2>&1
check "ep 1 resumes the ep 4 checkpoint: $(tail -3 "$work/resume1.log")" $?
same_losses "$(losses "$work/resume1.log" | awk '$1 > 4')" "$(losses "$work/single.log" | awk '$1 > 4')"
check "resumed at ep 1: the uninterrupted losses: $(losses "$work/resume1.log")" $?
mpi 2 "$tessera" train "${model[@]}" --expert-model-parallel-size 2 --moe-grouped-gemm --load "$work/ckpt" \
  >"$work/resume2.log" 2>&1
check "ep 2 (grouped experts) resumes the ep 4 checkpoint: $(tail -3 "$work/resume2.log")" $?
same_losses "$(losses "$work/resume2.log" | awk '$1 > 4')" "$(losses "$work/single.log" | awk '$1 > 4')"
check "resumed at ep 2 with grouped experts: the uninterrupted losses: $(losses "$work/resume2.log")" $?

# Generation from the MoE checkpoint: one process, and two ranks with the experts split over them.
g1=$("$tessera" generate --load "$work/ckpt" --prompt "3 5 7" --tokens-to-generate 10 --temperature 0 2>"$work/g1.err")
check "generate at ep 1: $g1 $(cat "$work/g1.err")" $?
g2=$(mpi 2 "$tessera" generate --load "$work/ckpt" --prompt "3 5 7" --tokens-to-generate 10 --temperature 0 \
       --tensor-model-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 \
       --moe-grouped-gemm 2>"$work/g2.err")
check "generate at ep 2 x tp 2: $g2 $(cat "$work/g2.err")" $?
[[ "$g1" =~ ^"3 5 7"( [0-9]+)+$ ]] && [ "$g1" = "$g2" ]
check "the same greedy tokens at ep 1 and ep 2: '$g1' vs '$g2'" $?
start_server "$work/serve.log" mpirun --oversubscribe --allow-run-as-root -np 2 "$tessera" serve --load "$work/ckpt" --port 0 --expert-model-parallel-size 2
check "serve at ep 2 on two ranks of tp 1 starts: $(cat "$work/serve.log")" $?
served=$(curl -s -X PUT -H 'Content-Type: application/json' \
           -d '{"prompts": ["3 5 7"], "tokens_to_generate": 10, "top_k": 1}' "http://127.0.0.1:$port/api")
python3 -c 'import json, sys; sys.exit(json.loads(sys.argv[1])["text"][0] != sys.argv[2])' "$served" "$g1" 2>/dev/null
check "serve at ep 2 gives generate's greedy tokens: $served vs '$g1'" $?
stop_server
check "the ep 2 server stops on SIGTERM: $(tail -2 "$work/serve.log")" $?

expect_failure "--num-experts=4: must be divisible by --expert-model-parallel-size=3" \
  mpi 3 "$tessera" train "${model[@]}" --expert-model-parallel-size 3 --global-batch-size 3
expect_failure "needs --sequence-parallel with MoE" \
  mpi 2 "$tessera" train "${model[@]}" --tensor-model-parallel-size 2
expect_failure "--moe-token-dispatcher-type=flex: must be alltoall or allgather" \
  "$tessera" train "${model[@]}" --moe-token-dispatcher-type flex
finish moe_cli
