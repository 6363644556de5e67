#!/usr/bin/env python3
"""Fault campaign (issue 58, item 6): SIGKILL to a random rank at a random moment of training jobs that
save often, at tp 2, pp 2 and dp 2 (a tiny model, 2 ranks each), and after every kill:
  - every tracker names a complete checkpoint (bench/fault_campaign_check.py: the index, every rank's
    files with their sizes, safetensors headers whole);
  - no checkpoint the killed job reported saved is lost (each is at or before the newest complete one);
  - the next job, the same command with --load, resumes from exactly the newest complete checkpoint of
    either kind, and every loss it logs is the uninterrupted run's.
Saves: persistent every 5 iterations and non-persistent every 2; tp 2: asynchronous, local non-persistent;
pp 2: synchronous, global; dp 2: distributed optimizer, asynchronous, global, --ckpt-keep-last 2. Half
the jobs write each file 20 ms slower (TESSERA_CKPT_WRITE_DELAY_MS), so that more kills land in a save.

  nice -n 19 python3 bench/fault_campaign.py build/release/tessera --kills 500 [--minutes M] [--seed S] [--out DIR]

Prints a line per kill and the tally (also DIR/tally.json); a failure's logs are kept in DIR/failures.
Exits 1 if any check failed.
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_campaign_check as check  # noqa: E402

MODEL = ("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
         "--tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 "
         "--log-interval 1 --eval-iters 0").split()
# name: (the layout's flags, its saving flags)
LAYOUTS = {
    "tp2": ("--tensor-model-parallel-size 2", "--async-save --non-persistent-ckpt-type local "
            "--non-persistent-local-ckpt-dir {dir}/nodes"),
    "pp2": ("--pipeline-model-parallel-size 2", "--non-persistent-ckpt-type global"),
    "dp2": ("--use-distributed-optimizer", "--async-save --non-persistent-ckpt-type global --ckpt-keep-last 2"),
}
LOSS = re.compile(r"iteration +(\d+)/.*lm loss: (\S+) ")
LOADED = re.compile(r"loaded checkpoint from \S+.* at iteration (\d+)")
SAVED = re.compile(r" saved (?:non-persistent )?checkpoint.* at iteration (\d+) ")
STARTED_ASYNC = re.compile(r"started asynchronous save of.* at iteration (\d+) ")


def losses(text):
    return {int(i): v for i, v in LOSS.findall(text)}


class Layout:
    def __init__(self, name, args, root):
        self.name, self.dir = name, os.path.join(root, name)
        parallel, saving = LAYOUTS[name]
        self.flags = saving.replace("{dir}", self.dir).split()
        self.save = os.path.join(self.dir, "ckpt")
        self.np_type = self.flags[self.flags.index("--non-persistent-ckpt-type") + 1]
        self.np_global = os.path.join(self.save, "non_persistent")
        self.np_local = os.path.join(self.dir, "nodes")
        self.expected = -1  # where the next job must resume (-1: from scratch)
        self.mpirun = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"]
        self.base = [args.tessera, "train", *MODEL, "--train-iters", str(args.iters), *parallel.split()]
        out = subprocess.run(self.mpirun + self.base, capture_output=True, text=True, timeout=600)
        self.reference = losses(out.stdout + out.stderr)
        if out.returncode != 0 or len(self.reference) != args.iters:
            sys.exit(f"{name}: the uninterrupted run failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")

    def command(self):
        return self.mpirun + self.base + self.flags + ["--save", self.save, "--load", self.save, "--save-interval", "5",
                                          "--non-persistent-save-interval", "2"]

    def reset(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.expected = -1


def verify_resume(layout, text):
    """Problems with a job's start and losses: it resumed from layout.expected, and logged the reference."""
    problems = []
    m = LOADED.search(text)
    if m and int(m.group(1)) != layout.expected:
        problems.append(f"resumed from iteration {m.group(1)}, the newest complete checkpoint is {layout.expected}")
    if not m and layout.expected >= 0 and LOSS.search(text):
        problems.append(f"trained without loading the checkpoint of iteration {layout.expected}")
    for i, v in losses(text).items():
        if layout.reference.get(i) != v:
            problems.append(f"iteration {i}: loss {v}, uninterrupted {layout.reference.get(i)}")
            break
    return problems


def one_kill(layout, args, rng, log_path, before):
    """Runs a job, kills a random rank at a random moment; returns (record, problems)."""
    env = dict(os.environ)
    delay_ms = rng.choice([0, 20])
    env["TESSERA_CKPT_WRITE_DELAY_MS"] = str(delay_ms)
    # What the job starts from, kept for a failure's report (a tiny model: some hundred KB).
    shutil.rmtree(before, ignore_errors=True)
    shutil.copytree(layout.dir, before)
    started = time.time()
    with open(log_path, "w") as log:
        job = subprocess.Popen(layout.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    time.sleep(rng.uniform(0, args.max_delay))
    ranks = []
    while job.poll() is None and len(ranks) < 2 and time.time() - started < 30:  # mpirun may not have forked yet
        ranks = subprocess.run(["pgrep", "-P", str(job.pid), "-f", "train"], capture_output=True, text=True).stdout.split()
        if len(ranks) < 2:
            time.sleep(0.05)
    record = {"layout": layout.name, "write_delay_ms": delay_ms}
    if job.poll() is not None or len(ranks) < 2:
        job.wait()
        record["landed"] = "none: the job had ended"
        problems = verify_resume(layout, open(log_path).read())
        return record, problems + ([] if job.returncode == 0 else [f"the job failed by itself (status {job.returncode})"])
    victim = rng.randrange(len(ranks))
    os.kill(int(ranks[victim]), signal.SIGKILL)
    record.update(rank=victim, at_s=round(time.time() - started, 2))
    try:
        job.wait(timeout=60)
    except subprocess.TimeoutExpired:
        # A hang: what the job's processes were doing goes into its log before they are killed.
        ps = subprocess.run(["ps", "-o", "pid,stat,wchan:32,etime,args", "-g", str(job.pid)], capture_output=True, text=True)
        with open(log_path, "a") as log:
            log.write("\n--- processes 60 s after the kill ---\n" + ps.stdout)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        record["landed"] = "unknown: the job hung"
        return record, ["the job did not end within 60 s of the kill"]
    text = open(log_path).read()
    problems = verify_resume(layout, text)
    # Where the kill landed: in a synchronous save's write (a .tmp directory of this job), while an
    # asynchronous save was in flight (being written, or written and not yet finalised), in start-up or
    # loading (no iteration logged), or in a training step with no save in flight.
    tmp = [t for t in check.partial_saves(layout.save, layout.np_global, layout.np_local) if os.path.getmtime(t) >= started]
    pending = set(STARTED_ASYNC.findall(text)) - set(SAVED.findall(text))
    logged = losses(text)
    if "--async-save" in layout.flags and (tmp or pending):
        record["landed"] = "an asynchronous save in flight"
    elif tmp:
        record["landed"] = "a synchronous save's write"
    elif not logged:
        record["landed"] = "start-up or loading"
    else:
        record["landed"] = "a training step, no save in flight"
    try:
        newest, where = check.newest(layout.save, layout.np_type, layout.np_global, layout.np_local, 2)
    except (OSError, ValueError, KeyError) as e:
        return record, problems + [f"a tracker names an incomplete checkpoint: {e!r}"]
    saved = [int(i) for i in SAVED.findall(text)]
    if saved and max(saved) > newest:
        problems.append(f"the checkpoint of iteration {max(saved)} was reported saved, the newest complete is {newest}")
    last = max(logged) if logged else layout.expected
    record.update(newest=newest, lost=max(0, last - max(newest, 0)), kind=os.path.basename(where))
    layout.expected = newest
    return record, problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("tessera")
    p.add_argument("--kills", type=int, default=500)
    p.add_argument("--minutes", type=float, default=0, help="stop after this long (0: no limit)")
    p.add_argument("--iters", type=int, default=300, help="a job's --train-iters")
    p.add_argument("--max-delay", type=float, default=3.0, help="the kill comes up to this many s after the start")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="/tmp/tessera_fault_campaign")
    args = p.parse_args()
    for name, value in (("--kills", args.kills), ("--iters", args.iters)):
        if value <= 0:
            p.error(f"{name}={value}: must be positive")
    if args.max_delay <= 0 or args.minutes < 0:
        p.error(f"--max-delay={args.max_delay} must be positive, --minutes={args.minutes} not negative")
    os.environ.update(OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE", OMPI_MCA_mpi_yield_when_idle="1")
    for hook in ("TESSERA_INJECT_FAULT", "TESSERA_INJECT_LOSS", "TESSERA_STRAGGLER_DELAY_MS", "TESSERA_CKPT_WRITE_DELAY_MS"):
        os.environ.pop(hook, None)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(os.path.join(args.out, "failures"))
    rng = random.Random(args.seed)
    layouts = [Layout(n, args, args.out) for n in LAYOUTS]
    for layout in layouts:
        layout.reset()
    start, records, failures, completed = time.time(), [], [], 0
    while sum(1 for r in records if "rank" in r) < args.kills:
        if args.minutes and time.time() - start > args.minutes * 60:
            break
        layout = rng.choice(layouts)
        log_path = os.path.join(args.out, "job.log")
        before = os.path.join(args.out, "before")
        record, problems = one_kill(layout, args, rng, log_path, before)
        if record["landed"].startswith("none"):
            completed += 1
            layout.reset()
            if not problems:
                continue
        records.append(record)
        n = sum(1 for r in records if "rank" in r)
        print(f"kill {n} {json.dumps(record)}" + (f" FAILED: {problems}" if problems else ""), flush=True)
        if problems:
            keep = os.path.join(args.out, "failures", str(n))
            shutil.copytree(layout.dir, os.path.join(keep, "after"))
            shutil.copytree(before, os.path.join(keep, "before"))
            shutil.copy(log_path, keep)
            failures.append({"kill": n, **record, "problems": problems})
            layout.reset()
    # Each layout's last job resumes to the end without a kill: the losses of the rest of the run.
    for layout in layouts:
        out = subprocess.run(layout.command(), capture_output=True, text=True, timeout=600)
        problems = verify_resume(layout, out.stdout + out.stderr)
        if out.returncode != 0 or problems:
            failures.append({"final resume": layout.name, "status": out.returncode, "problems": problems})
    kills = [r for r in records if "rank" in r]
    tally = {
        "kills": len(kills), "minutes": round((time.time() - start) / 60, 1), "jobs that ended before their kill": completed,
        "by layout": collections.Counter(r["layout"] for r in kills),
        "landed": collections.Counter(r["landed"] for r in kills),
        "resumed from": collections.Counter(r.get("kind", "?") for r in kills),
        "iterations lost: max": max((r.get("lost", 0) for r in kills), default=0),
        "iterations lost: mean": round(sum(r.get("lost", 0) for r in kills) / max(1, len(kills)), 2),
        "failures": failures, "seed": args.seed,
    }
    json.dump(tally, open(os.path.join(args.out, "tally.json"), "w"), indent=1)
    print(json.dumps(tally, indent=1))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
