"""What a killed job left on disk, for bench/fault_campaign.py (issue 58, item 6).

A checkpoint is complete when its directory has the index (written last), the index names its iteration,
and every file the index lists is there with its recorded size and, for a safetensors file, a header
that parses and accounts for the file's bytes. Every tracker must name a complete checkpoint; the newest
committed one of either kind (the one its tracker names) is where `tessera train --load` must resume. A
directory renamed into place whose tracker was not yet moved (a kill between the two) is not committed.
"""
import json
import os
import re
import struct

TRACKER = "latest_checkpointed_iteration.txt"


def check_safetensors(path, size):
    """Raises unless PATH is a whole safetensors file of SIZE bytes."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        header = json.loads(f.read(n))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        raise ValueError(f"{path}: header accounts for {8 + n + end} bytes, the file has {size}")


def check_complete(directory, iteration):
    """Raises unless DIRECTORY/iter_N is a complete checkpoint of ITERATION."""
    d = os.path.join(directory, "iter_%07d" % iteration)
    with open(os.path.join(d, "index.json")) as f:
        index = json.load(f)
    if index["iteration"] != iteration:
        raise ValueError(f"{d}: the index says iteration {index['iteration']}")
    if not index["files"]:
        raise ValueError(f"{d}: the index lists no files")
    for name, entry in index["files"].items():
        path = os.path.join(d, name)
        size = os.path.getsize(path)
        if size != entry["bytes"]:
            raise ValueError(f"{path}: {size} bytes, the index records {entry['bytes']}")
        if name.endswith(".safetensors"):
            check_safetensors(path, size)


def tracked(directory):
    """The iteration DIRECTORY's tracker names (checked complete), or -1 without a tracker."""
    try:
        with open(os.path.join(directory, TRACKER)) as f:
            text = f.read()
    except FileNotFoundError:
        return -1
    if not re.fullmatch(r"\d+\n?", text):
        raise ValueError(f"{directory}/{TRACKER}: {text!r} is not an iteration")
    iteration = int(text)
    check_complete(directory, iteration)
    return iteration


def newest(save, np_type, np_global, np_local, ranks):
    """(iteration, where) of the newest complete checkpoint --load must take, after checking that every
    tracker names a complete checkpoint (raises otherwise). Local: the oldest of the ranks' trackers, which
    every rank must hold complete (a newer one some rank has is rolled back on loading)."""
    best = (tracked(save), save)
    if np_type == "global":
        it = tracked(np_global)
        if it > best[0] or (it == best[0] and it >= 0):  # the non-persistent one wins a tie, as Megatron's
            best = (it, np_global)
    elif np_type == "local":
        # A rank's save is committed when its tracker names it (a directory renamed into place with the
        # tracker not yet moved, a kill between the two, is not: tessera, as Megatron, trusts the tracker).
        # The ranks agree on the oldest of their trackers, which every rank must hold complete.
        trackers = [tracked(os.path.join(np_local, "rank_%05d" % r)) for r in range(ranks)]
        it = min(trackers)
        if it >= 0:
            for r in range(ranks):
                check_complete(os.path.join(np_local, "rank_%05d" % r), it)
            if it >= best[0]:
                best = (it, np_local)
    return best


def partial_saves(*directories):
    """Paths of the unfinished saves (iter_N.tmp) left in DIRECTORIES and their rank_* subdirectories."""
    found = []
    for directory in directories:
        if not directory or not os.path.isdir(directory):
            continue
        subdirs = [directory] + [os.path.join(directory, n) for n in os.listdir(directory) if n.startswith("rank_")]
        for d in subdirs:
            if os.path.isdir(d):
                found += [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".tmp")]
    return found
