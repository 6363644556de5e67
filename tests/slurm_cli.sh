#!/usr/bin/env bash
# The Slurm example, examples/slurm/pretrain_gpt.sbatch, on a real single-node Slurm cluster that this
# test starts on loopback and stops (munged, slurmctld and slurmd from Debian's munge, slurmctld and
# slurmd packages, with a generated configuration, key, ports and directories in a temporary directory):
#  - a 2-task job through sbatch (srun --mpi=pmix, no mpirun) gives the losses of the same run under
#    `mpirun -np 2`, character for character;
#  - a job that stops at --exit-duration-in-mins saves and exits 0, and a second job submitted with
#    --dependency=afterok on it resumes from that checkpoint to the uninterrupted run's losses;
#  - a job stopped by scancel saves (--exit-signal-handler) and is recorded CANCELLED.
# Skipped (77), saying why, where Slurm is not installed or its daemons do not start. Every daemon, job
# step and task is stopped on exit, also on failure, and by a watchdog if this script is killed.
set -uo pipefail
tessera=$(realpath "${1:?usage: slurm_cli.sh path/to/tessera}")
root=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/lib/checks.sh"
script=$root/examples/slurm/pretrain_gpt.sbatch

for tool in python3 munge unmunge munged mungekey slurmctld slurmd sbatch srun scontrol squeue scancel; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh installs munge, slurmctld, slurmd and slurm-client)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs (this is uid $(id -u))"
# srun --mpi=pmix: Slurm's plugin (slurm-wlm-basic-plugins) opens PMIx's libpmix.so (libpmix-dev)
compgen -G "/usr/lib/*/slurm-wlm/mpi_pmix.so" >/dev/null || skip "Slurm's mpi_pmix plugin is not installed"
compgen -G "/usr/lib/*/pmix2/lib/libpmix.so" >/dev/null || skip "libpmix.so, which mpi_pmix opens, is not installed (libpmix-dev)"

work=$(mktemp -d)
export SLURM_CONF=$work/slurm.conf
mark="TESSERA_SLURM_TEST=$work"  # in the environment of every daemon, step and task: what cleanup stops
daemons=()
watchdog=

# ours DIR MARK: the processes with MARK in their environment (the daemons, the jobs' tasks) or a file
# open under DIR (slurmstepd, which slurmd starts with an environment of its own, keeps slurmd's log
# open), other than this shell.
ours() {
  local p
  for p in $( { grep -lzxF -- "$2" /proc/[0-9]*/environ; find /proc/[0-9]*/fd -maxdepth 1 -lname "$1/*"; } 2>/dev/null |
              cut -d/ -f3 | sort -u); do
    [ "$p" != $$ ] && [ "$p" != "$BASHPID" ] && echo "$p"
  done
}
cleanup() {
  trap - EXIT INT TERM
  # the jobs first, while the controller is there to end them; then the daemons; what is left after 5 s
  # is killed
  [ ${#daemons[@]} -ge 2 ] && kill -0 "${daemons[1]}" 2>/dev/null && timeout 10 scancel --quiet --user="$(id -un)" 2>/dev/null
  local p i
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for i in $(seq 50); do
    [ -z "$(ours "$work" "$mark")" ] && break
    sleep 0.1
  done
  for p in $(ours "$work" "$mark"); do kill -KILL "$p" 2>/dev/null; done
  [ ${#daemons[@]} -gt 0 ] && wait "${daemons[@]}" 2>/dev/null
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A watchdog in its own session: if this script is killed without its trap (a CTest timeout), it kills
# what is ours and removes the directory.
setsid bash -c "$(declare -f ours)"'
  while kill -0 "$1" 2>/dev/null; do sleep 2; done
  for p in $(ours "$2" "$3"); do kill -KILL "$p"; done
  rm -rf "$2"' watchdog $$ "$work" "$mark" </dev/null >/dev/null 2>&1 &
watchdog=$!

# Gives up on Slurm with the reason and the end of the logs.
no_slurm() {
  echo "$1"
  tail -n 20 "$work"/log/* 2>/dev/null
  skip "Slurm could not start here: $1"
}

# --- munged: its own key, socket and files ---
mkdir -p "$work/munge" "$work/state" "$work/spool" "$work/log" "$work/jobs" "$work/tmp"
chmod 700 "$work/munge"
mungekey --create --keyfile "$work/munge/munge.key" >"$work/log/mungekey" 2>&1 || no_slurm "mungekey failed"
TESSERA_SLURM_TEST=$work munged --foreground --force --key-file "$work/munge/munge.key" --socket "$work/munge/socket" \
  --log-file "$work/log/munged" --pid-file "$work/munge/pid" --seed-file "$work/munge/seed" >/dev/null 2>&1 &
daemons+=($!)
deadline=$((SECONDS + 10))
until munge -n -S "$work/munge/socket" 2>/dev/null | unmunge -S "$work/munge/socket" >/dev/null 2>&1; do
  kill -0 "${daemons[0]}" 2>/dev/null || no_slurm "munged exited"
  [ $SECONDS -lt $deadline ] || no_slurm "munged did not answer within 10 s"
  sleep 0.1
done

# --- slurm.conf for this machine: one node on 127.0.0.1 with its cores, free ports ---
# TmpFS: where Slurm's PMIx plugin makes each step's directory (spmix_appdir_UID_JOB.STEP). Under /tmp,
# the default, one left by an earlier cluster (every cluster numbers its jobs from 1) fails that step's
# launch, and srun still exits 0.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
node=$(hostname -s)
cat > "$SLURM_CONF" <<EOF
ClusterName=tessera-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld
SlurmdLogFile=$work/log/slurmd
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TmpFS=$work/tmp
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

# The daemons in the foreground, niced (the jobs' tasks inherit slurmd's priority).
TESSERA_SLURM_TEST=$work nice -n 19 slurmctld -D -i -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
daemons+=($!)
TESSERA_SLURM_TEST=$work nice -n 19 slurmd -D -N "$node" -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
daemons+=($!)
deadline=$((SECONDS + 30))
while :; do
  state=$(timeout 5 scontrol show node "$node" 2>/dev/null | grep -o "State=[A-Z+_]*" | head -n 1)
  [ "$state" = State=IDLE ] && break
  for p in "${daemons[@]}"; do kill -0 "$p" 2>/dev/null || no_slurm "a Slurm daemon exited (${state:-no node state})"; done
  [ $SECONDS -lt $deadline ] || no_slurm "the node is not idle within 30 s (${state:-slurmctld does not answer})"
  sleep 0.2
done

# --- jobs ---
tok=(--tokenizer-type NullTokenizer --vocab-size 40)
flags=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "${tok[@]}" --mock-data
       --micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --log-interval 1 --eval-interval 1000 --eval-iters 0)
iters=120
export OMPI_MCA_mpi_yield_when_idle=1
# iteration N and its loss, one a line, from Megatron's log lines (mpirun's may follow a progress bar)
losses() { sed -n 's/.*iteration *\([0-9]*\)\/ *[0-9]* |.*| lm loss: \([^ ]*\) |.*/\1 \2/p' "$1"; }
latest() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null; }

# Submits the example; prints the job id.
submit() {  # submit NAME CHECKPOINT_PATH [sbatch options --] [train flags]
  local name=$1 ckpt=$2 opts=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  TESSERA_SLURM_TEST=$work TESSERA="$tessera" timeout 30 sbatch --parsable --job-name="$name" --chdir="$work/jobs" --time=10 \
    --output="$work/jobs/$name.out" "${opts[@]}" "$script" "$ckpt" "$@"
}
# Waits for the job to end; prints its final state (COMPLETED, FAILED, ...).
wait_job() {  # wait_job ID TIMEOUT_S
  local state deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    state=$(timeout 10 scontrol show job "$1" 2>/dev/null | grep -o "JobState=[A-Z_]*" | cut -d= -f2)
    case $state in
      PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|RESIZING|"") sleep 0.5 ;;
      *) echo "$state"; return ;;
    esac
  done
  timeout 10 scancel "$1" 2>/dev/null
  echo "TIMEOUT($state)"
}

# `check` takes the status as its last argument: each status is kept in $ok before a description that
# runs commands of its own (they would set $? first).
tail_of() { tail -n "$2" "$1" 2>/dev/null; }

# The reference: the same flags under mpirun, 2 ranks of one thread (what the script gives each task).
t0=$(date +%s.%N)
OMP_NUM_THREADS=1 timeout 300 nice -n 19 mpirun --oversubscribe --allow-run-as-root -np 2 "$tessera" train \
  "${flags[@]}" --train-iters $iters --save "$work/ref" --load "$work/ref" >"$work/ref.out" 2>&1
ok=$?
check "the mpirun run exits 0 (rc $ok): $(tail_of "$work/ref.out" 20)" $ok
ref_seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
losses "$work/ref.out" >"$work/ref.losses"
[ "$(wc -l <"$work/ref.losses")" -eq $iters ]
ok=$?
check "the mpirun run logs $iters losses: $(tail_of "$work/ref.out" 5)" $ok

# 1. The whole run as one job. The script derives --exit-duration-in-mins from --time=10 (less 5 min).
# 2. The same run in two jobs: the first stops at --exit-duration-in-mins (EXIT_DURATION_IN_MINS); the
#    second, held until the first ends well, resumes from its checkpoint. The duration is 30% of the time
#    that $iters iterations take at the reference's fastest iteration: the first job cannot finish within
#    it however idle the machine becomes, and it always runs 1 iteration at least (a busy machine stops it
#    early; an idle one, later).
fastest_ms=$(grep -o "elapsed time per iteration (ms): [0-9][0-9.]*" "$work/ref.out" | awk '{ print $NF }' | sort -g | head -n 1)
exit_mins=$(awk -v ms="${fastest_ms:-1}" -v n=$iters 'BEGIN { print 0.3 * n * ms / 60000 }')
whole=$(submit whole "$work/whole" -- "${flags[@]}" --train-iters $iters)
[[ $whole =~ ^[0-9]+$ ]]
check "sbatch accepts the whole run: $whole" $?
first=$(EXIT_DURATION_IN_MINS=$exit_mins submit first "$work/split" -- "${flags[@]}" --train-iters $iters)
[[ $first =~ ^[0-9]+$ ]]
check "sbatch accepts the first job: $first" $?
second=$(submit second "$work/split" --dependency=afterok:"$first" --kill-on-invalid-dep=yes -- \
         "${flags[@]}" --train-iters $iters)
[[ $second =~ ^[0-9]+$ ]]
check "sbatch accepts the dependent job: $second" $?

state=$(wait_job "$whole" 240)
[ "$state" = COMPLETED ]
ok=$?
check "the whole job completes: $state $(tail_of "$work/jobs/whole.out" 20)" $ok
out=$(cat "$work/jobs/whole.out" 2>/dev/null)
grep -qF "pretrain_gpt.sbatch: job $whole: 1 node(s), 2 tasks, time limit 10:00, --exit-duration-in-mins 5" <<<"$out"
ok=$?
check "the script reports 2 tasks and the exit before the time limit: $(head -n 3 <<<"$out")" $ok
grep -qF "tp1 pp1 dp2" <<<"$out"
ok=$?
check "srun's 2 tasks are one MPI job of 2 data-parallel ranks: $(grep -F plan <<<"$out")" $ok
losses "$work/jobs/whole.out" >"$work/whole.losses"
diff "$work/ref.losses" "$work/whole.losses" >"$work/whole.diff"
ok=$?
check "the sbatch job's losses equal mpirun's ($(wc -l <"$work/whole.losses") lines): $(head -n 6 "$work/whole.diff")" $ok

state=$(wait_job "$first" 120)
[ "$state" = COMPLETED ]
ok=$?
check "the first job exits 0: $state $(tail_of "$work/jobs/first.out" 20)" $ok
out=$(cat "$work/jobs/first.out" 2>/dev/null)
stop=$(latest "$work/split")
last=$(losses "$work/jobs/first.out" | tail -n 1 | cut -d' ' -f1)
grep -qE "^\[exiting program after [0-9.e-]+ minutes\] datetime: " <<<"$out" && [ -n "$stop" ] &&
  [ "$stop" -ge 1 ] && [ "$stop" -lt $iters ] && [ "$last" = "$stop" ]
ok=$?
check "the first job stops at --exit-duration-in-mins $exit_mins after iteration ${last:-?} of $iters and saves there (${stop:-no checkpoint}): $(tail -n 3 <<<"$out")" $ok

state=$(wait_job "$second" 240)
[ "$state" = COMPLETED ]
ok=$?
check "the dependent job completes: $state $(tail_of "$work/jobs/second.out" 20)" $ok
out=$(cat "$work/jobs/second.out" 2>/dev/null)
grep -qF "loaded checkpoint from $work/split at iteration $stop " <<<"$out" &&
  [ "$(losses "$work/jobs/second.out" | head -n 1 | cut -d' ' -f1)" = $((stop + 1)) ]
ok=$?
check "the dependent job resumes after iteration $stop: $(grep -F checkpoint <<<"$out" | head -n 3)" $ok
{ losses "$work/jobs/first.out"; losses "$work/jobs/second.out"; } >"$work/split.losses"
diff "$work/ref.losses" "$work/split.losses" >"$work/split.diff"
ok=$?
check "the two jobs' losses (1-$stop, then $((stop + 1))-$iters) equal the uninterrupted run's: $(head -n 6 "$work/split.diff")" $ok

# 3. scancel (a user, a preemption; the time limit does the same): Slurm sends SIGTERM to every task and
#    SIGKILL KillWait seconds later (5 here). With --exit-signal-handler the ranks save in that time; the
#    job is recorded CANCELLED whatever they do.
cancel=$(submit cancel "$work/cancel" -- "${flags[@]}" --train-iters 100000 --exit-signal-handler)
[[ $cancel =~ ^[0-9]+$ ]]
check "sbatch accepts the job to cancel: $cancel" $?
for _ in $(seq 1200); do
  grep -qE "iteration +1/" "$work/jobs/cancel.out" 2>/dev/null && break
  sleep 0.1
done
timeout 10 scancel "$cancel"
state=$(wait_job "$cancel" 60)
saved=$(latest "$work/cancel")
[ "$state" = CANCELLED ] && [ -n "$saved" ] && [ "$saved" -ge 1 ] &&
  [ -f "$work/cancel/iter_$(printf %07d "$saved")/index.json" ]
ok=$?
check "scancel: the job is CANCELLED ($state) with a checkpoint (${saved:-none}): $(tail_of "$work/jobs/cancel.out" 4)" $ok
grep -qF "exiting program after receiving SIGTERM." "$work/jobs/cancel.out"
ok=$?
check "scancel: the ranks say they stopped on SIGTERM: $(tail_of "$work/jobs/cancel.out" 4)" $ok

echo "slurm: ${SECONDS} s in all, the reference ${ref_seconds%.*} s under mpirun (fastest iteration ${fastest_ms} ms);" \
     "the first job stopped after iteration $stop of $iters"
if [ "$failures" -gt 0 ]; then
  for f in "$work"/log/slurmctld "$work"/log/slurmd; do echo "--- $f"; grep -v debug "$f" | tail -n 15; done
fi
finish slurm_cli
