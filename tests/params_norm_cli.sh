#!/usr/bin/env bash
# --log-params-norm (Megatron's "params norm" in the log line): every layout logs the single process's
# norm, each parameter counted once however it is split, replicated or tied (tensor, sequence, pipeline
# and data parallelism, the distributed optimizer, experts). That the norm is the parameters' own is
# src/train/trainer_test.cc (LogsTheParametersNorm).
set -uo pipefail
tessera=${1:?usage: params_norm_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

# 64 ids padded to 64 at tp 1 and 2: the same model (and initialisation) at every layout.
model="--mock-data --tokenizer-type NullTokenizer --vocab-size 63 --make-vocab-size-divisible-by 32
       --num-layers 4 --hidden-size 32
       --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --global-batch-size 4 --lr 1e-3
       --train-iters 3 --eval-iters 0 --log-interval 1 --log-params-norm"
norms() { grep -o 'params norm: [0-9.]*' <<<"$1" | awk '{print $3}' | tr '\n' ' '; }

# same_norms "what" ranks flags...: the norms at `ranks` ranks are those of one process with the flags
# that are not layout flags ($model_flags).
model_flags=""
same_norms() {
  local what=$1 ranks=$2 out got single expected
  shift 2
  single=$("$tessera" train $model $model_flags 2>&1)
  check "$what: one process exits 0: $single" $?
  expected=$(norms "$single")
  [ "$(wc -w <<<"$expected")" -eq 3 ]
  check "$what: three params norms logged: $expected" $?
  out=$($mpirun -np "$ranks" "$tessera" train $model $model_flags "$@" 2>&1)
  check "$what exits 0: $out" $?
  got=$(norms "$out")
  python3 - "$expected" "$got" <<'PY'
import sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) == 3 and all(abs(x - y) <= 2e-3 for x, y in zip(a, b)) else 1)
PY
  check "$what: params norms $got should be the single process's $expected" $?
}
same_norms "tp 2 sequence parallel" 2 --tensor-model-parallel-size 2 --sequence-parallel
same_norms "pp 2 (tied embedding on both ends)" 2 --pipeline-model-parallel-size 2
same_norms "dp 2 distributed optimizer" 2 --use-distributed-optimizer
same_norms "tp 2 x pp 2" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
model_flags="--num-experts 4 --moe-router-topk 2"
same_norms "MoE ep 2" 2 --expert-model-parallel-size 2
same_norms "MoE tp 2 ep 2 sequence parallel" 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 \
  --sequence-parallel
finish params_norm_cli
