#!/usr/bin/env bash
# Restart without losing work (issue 58, item 5): runs a training job (`mpirun ... tessera train ...`,
# `srun ... tessera train ...` or `tessera train ...`) and, when it dies, runs it again with `--load`
# pointing at its `--save` directory, so that it continues from the newest complete checkpoint, persistent
# or non-persistent (tessera picks it, as Megatron's `--load` does), up to --max-restarts times.
#
#   scripts/supervise.sh [--max-restarts N] [--restart-delay SECONDS] -- mpirun -np 4 tessera train ... --save ckpt
#
# A wrapper, as torchrun's and NVIDIA Resiliency Extension's ft_launcher `--max-restarts` are, and not a
# flag of `tessera train`: when a rank dies mpirun (or srun) ends every rank, so the loop must live outside
# the job. Exit statuses (Megatron's): 0 ends the loop; 16 (EXIT_CODE_RESUME_TO_DISAMBIGUATE, a persistent
# rerun result) is not restarted here, since the same nodes would reproduce it: the status is returned for
# the scheduler to resume elsewhere; 17 (a transient fault, EXIT_CODE_FAILED_ON_RESULT_VALIDATION) and any
# other failure (a rank killed, a node lost, a collective timed out) restart. SIGTERM, SIGINT, SIGHUP,
# SIGUSR1 and SIGUSR2 are passed on to the job and end the loop once it has exited (SIGUSR1 with
# `--exit-signal-handler --exit-signal SIGUSR1`: every rank saves, then the supervisor exits 0).
# Each job sees TESSERA_RESTART_COUNT (0 for the first, as torchrun's TORCHELASTIC_RESTART_COUNT).
set -uo pipefail

say() { echo "supervise: $(date -u '+%Y-%m-%d %H:%M:%S'): $*" >&2; }
usage() {
  echo "usage: $0 [--max-restarts N] [--restart-delay SECONDS] -- COMMAND... (a tessera train command with --save DIR)" >&2
  exit 2
}
refuse() { echo "supervise: $*" >&2; exit 2; }

max_restarts=3
restart_delay=0
while [ $# -gt 0 ]; do
  case $1 in
    --max-restarts|--restart-delay)
      [ $# -ge 2 ] || refuse "$1: needs a value"
      flag=$1 value=$2
      shift 2 ;;
    --max-restarts=*|--restart-delay=*) flag=${1%%=*} value=${1#*=}; shift ;;
    --) shift; break ;;
    *) refuse "unknown option $1 (the command comes after --)" ;;
  esac
  case $flag in
    --max-restarts) [[ $value =~ ^[0-9]+$ ]] || refuse "--max-restarts=$value: must be a non-negative integer"
                    max_restarts=$value ;;
    --restart-delay) [[ $value =~ ^[0-9]+(\.[0-9]+)?$ ]] || refuse "--restart-delay=$value: must be a non-negative number of seconds"
                     restart_delay=$value ;;
  esac
done
[ $# -gt 0 ] || usage
command=("$@")

# The last value of a flag in the command (tessera takes a flag's last occurrence), `--flag V` or `--flag=V`.
flag_value() {
  local value="" i
  for ((i = 0; i < ${#command[@]}; i++)); do
    case ${command[i]} in
      "$1") [ $((i + 1)) -lt ${#command[@]} ] && value=${command[i + 1]} ;;
      "$1"=*) value=${command[i]#*=} ;;
    esac
  done
  printf '%s' "$value"
}
save=$(flag_value --save)
[ -n "$save" ] || refuse "the command has no --save DIR: a restart could only start again from the beginning"
load=$(flag_value --load)
np_type=$(flag_value --non-persistent-ckpt-type)
np_global=$(flag_value --non-persistent-global-ckpt-dir)
np_global=${np_global:-$save/non_persistent}
np_local=$(flag_value --non-persistent-local-ckpt-dir)

# newest_checkpoint: "ITERATION DIR" of the newest tracker under --save and the non-persistent directories
# (what the log reports; tessera itself decides, and rolls back a local one not every rank completed).
newest_checkpoint() {
  local best=-1 where=none it tracker
  local trackers=("$save/latest_checkpointed_iteration.txt")
  [ "$np_type" = global ] && trackers+=("$np_global/latest_checkpointed_iteration.txt")
  [ "$np_type" = local ] && [ -n "$np_local" ] && trackers+=("$np_local"/rank_*/latest_checkpointed_iteration.txt)
  for tracker in "${trackers[@]}"; do
    it=$(cat "$tracker" 2>/dev/null) || continue
    [[ $it =~ ^[0-9]+$ ]] && [ "$it" -gt "$best" ] && best=$it where=$(dirname "$tracker")
  done
  echo "$best $where"
}

# The command of a restart: `--load SAVE` appended (the last occurrence wins) once --save holds a
# checkpoint, and the flags of a first load from another checkpoint dropped (--finetune would start again
# at iteration 0, --no-load-optim and --no-load-rng would lose the optimizer's and the data's state).
restart_command() {
  local arg
  restart=()
  if [ "$(newest_checkpoint | cut -d' ' -f1)" -lt 0 ]; then restart=("${command[@]}"); return; fi
  for arg in "${command[@]}"; do
    case $arg in --finetune|--no-load-optim|--no-load-rng) continue ;; esac
    restart+=("$arg")
  done
  [ "$load" = "$save" ] || restart+=(--load "$save")
}

# Signals go to the job; the loop ends when it has exited. Job control puts the job in its own process
# group, so a terminal's Ctrl-C reaches it once, through here (a background job of a script ignores SIGINT).
set -m
child=""
stopping=""
forward() {
  stopping=$1
  say "SIG$1 received: passed on to the job (pid $child); no restart after it exits"
  [ -n "$child" ] && kill -s "$1" "$child" 2>/dev/null
}
for sig in TERM INT HUP USR1 USR2; do trap "forward $sig" "$sig"; done

attempt=0
run=("${command[@]}")
while :; do
  export TESSERA_RESTART_COUNT=$attempt
  say "attempt $((attempt + 1)) of at most $((max_restarts + 1)): ${run[*]}"
  # No stdin: a job in a background process group that reads the terminal (mpirun passes stdin on to
  # rank 0) would be stopped by SIGTTIN.
  "${run[@]}" </dev/null &
  child=$!
  while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break  # a trapped signal interrupted the wait: the job still runs
  done
  if [ "$rc" -eq 0 ]; then say "the job completed (status 0)"; exit 0; fi
  if [ -n "$stopping" ]; then say "the job exited with status $rc after SIG$stopping: not restarted"; exit "$rc"; fi
  if [ "$rc" -eq 16 ]; then
    say "the job exited with status 16 (Megatron's EXIT_CODE_RESUME_TO_DISAMBIGUATE: a rerun reproduced the" \
        "fault, a persistent problem): not restarted here; resume it from $save on other nodes to tell a faulty device"
    exit 16
  fi
  if [ "$attempt" -ge "$max_restarts" ]; then
    say "the job exited with status $rc; --max-restarts=$max_restarts reached: giving up"
    exit "$rc"
  fi
  attempt=$((attempt + 1))
  why="a rank died or failed"
  [ "$rc" -eq 17 ] && why="Megatron's EXIT_CODE_FAILED_ON_RESULT_VALIDATION: a transient fault"
  [ "$rc" -gt 128 ] && why="$why; signal $((rc - 128))"
  restart_command
  read -r it where < <(newest_checkpoint)
  if [ "$it" -ge 0 ]; then from="the newest complete checkpoint (on disk now: iteration $it in $where)"
  else from="the beginning: no checkpoint in $save yet"; fi
  say "the job exited with status $rc ($why); restart $attempt of $max_restarts in ${restart_delay} s from $from"
  sleep "$restart_delay"
  if [ -n "$stopping" ]; then say "SIG$stopping received while waiting to restart: not restarted"; exit "$rc"; fi
  run=("${restart[@]}")
done
