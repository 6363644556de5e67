"""Checks the rng_state of a model_optim_rng.pt that `tessera convert --saver megatron` wrote against what
Python, numpy and PyTorch themselves give after Megatron's _set_random_seed for that rank (seed + 100 x
pipeline rank for random, numpy, torch and the CUDA generator; the CUDA tracker's data-parallel-rng,
model-parallel-rng = seed + 2718 + tensor rank, expert-parallel-rng = seed + 1024 + 100 x expert rank +
expert-tensor rank), and applies it as Megatron's load_checkpoint does (random.setstate,
np.random.set_state, torch.set_rng_state; the CUDA states, which need a GPU to set, are checked as the
16 bytes torch.cuda.get_rng_state gives: the Philox seed and offset 0).

Used by megatron_save_check.py, megatron_bert_save_check.py and the MoE test.
"""
import random

import numpy as np
import torch


def _cuda_seed(t, what):
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or tuple(t.shape) != (16,):
        raise AssertionError(f"{what}: {type(t)} {getattr(t, 'dtype', '')} {tuple(getattr(t, 'shape', ()))}, "
                             "expected torch.uint8 of 16 bytes")
    seed, offset = np.frombuffer(t.numpy().tobytes(), dtype="<u8").tolist()
    if offset != 0:
        raise AssertionError(f"{what}: Philox offset {offset}, expected 0")
    return seed


def check_rng_state(rng_state, seed, pp_rank, tp_rank, ep_rank=0, etp_rank=None, where=""):
    """Raises AssertionError naming the entry that differs; returns a one-line summary."""
    etp_rank = tp_rank if etp_rank is None else etp_rank
    if not isinstance(rng_state, list) or len(rng_state) != 1 or not isinstance(rng_state[0], dict):
        raise AssertionError(f"{where}: rng_state is {type(rng_state)}, expected a list of one dict")
    s = rng_state[0]
    want_keys = ["random_rng_state", "np_rng_state", "torch_rng_state", "cuda_rng_state", "rng_tracker_states"]
    if list(s) != want_keys:
        raise AssertionError(f"{where}: rng_state keys {list(s)}, expected {want_keys}")
    rank_seed = seed + 100 * pp_rank

    random.seed(rank_seed)
    if s["random_rng_state"] != random.getstate():
        raise AssertionError(f"{where}: random_rng_state is not random.seed({rank_seed})'s")
    np.random.seed(rank_seed)
    want = np.random.get_state()
    got = s["np_rng_state"]
    if (not isinstance(got, tuple) or len(got) != 5 or got[0] != want[0] or not isinstance(got[1], np.ndarray)
            or got[1].dtype != want[1].dtype or not np.array_equal(got[1], want[1]) or tuple(got[2:]) != tuple(want[2:])):
        raise AssertionError(f"{where}: np_rng_state is not np.random.seed({rank_seed})'s: {got[0]} {got[2:]}")
    torch.manual_seed(rank_seed)
    want = torch.get_rng_state()
    got = s["torch_rng_state"]
    if got.dtype != torch.uint8 or got.shape != want.shape or not torch.equal(got, want):
        diff = (got != want).nonzero().flatten().tolist()[:8] if got.shape == want.shape else "shape"
        raise AssertionError(f"{where}: torch_rng_state is not torch.manual_seed({rank_seed})'s (bytes {diff})")
    if _cuda_seed(s["cuda_rng_state"], f"{where}: cuda_rng_state") != rank_seed:
        raise AssertionError(f"{where}: cuda_rng_state's seed is not {rank_seed}")
    tracker = s["rng_tracker_states"]
    want_tracker = {"data-parallel-rng": rank_seed, "model-parallel-rng": rank_seed + 2718 + tp_rank,
                    "expert-parallel-rng": rank_seed + 1024 + 100 * ep_rank + etp_rank}
    if not isinstance(tracker, dict) or list(tracker) != list(want_tracker):
        raise AssertionError(f"{where}: rng_tracker_states {type(tracker)} {list(tracker)}")
    for name, want_seed in want_tracker.items():
        if _cuda_seed(tracker[name], f"{where}: {name}") != want_seed:
            raise AssertionError(f"{where}: {name} seeded with {_cuda_seed(tracker[name], name)}, expected {want_seed}")

    # What Megatron's load_checkpoint does with it (the CUDA ones need a GPU).
    random.setstate(s["random_rng_state"])
    np.random.set_state(s["np_rng_state"])
    torch.set_rng_state(s["torch_rng_state"])
    draws = (random.random(), np.random.random(), torch.rand(1).item())
    random.seed(rank_seed)
    np.random.seed(rank_seed)
    torch.manual_seed(rank_seed)
    if draws != (random.random(), np.random.random(), torch.rand(1).item()):
        raise AssertionError(f"{where}: the restored generators draw otherwise than seed {rank_seed}'s")
    return f"rng_state of seed {rank_seed} as Megatron seeds it"
