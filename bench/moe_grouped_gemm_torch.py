#!/usr/bin/python3
"""PyTorch peer of bench_moe_grouped_gemm: the same experts (GELU-tanh MLPs, with or without biases,
fp32), rows per expert and threads, forward + backward through autograd, timed two ways:
  loop  one nn.functional.linear pair per expert, as Megatron's SequentialMLP;
  bmm   the experts' weights stacked and the rows padded to the largest count, torch.bmm (baddbmm with
        biases): the batched product --moe-grouped-gemm stands for where no grouped-GEMM kernel is.
Prints: RESULT loop_ms=<> bmm_ms=<> (medians of --reps, the two interleaved)."""
import argparse
import time

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--counts", required=True, help="rows per expert, comma-separated")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-bias", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    counts = [int(c) for c in a.counts.split(",")]
    E, h, f, m = len(counts), a.hidden, a.ffn, max(counts)
    bias = not a.no_bias
    w1 = (torch.randn(E, f, h) * 0.02).requires_grad_()
    w2 = (torch.randn(E, h, f) * 0.02).requires_grad_()
    b1 = torch.zeros(E, 1, f, requires_grad=True) if bias else None
    b2 = torch.zeros(E, 1, h, requires_grad=True) if bias else None
    x = torch.rand(sum(counts), h) * 2 - 1
    dy = torch.rand(sum(counts), h) * 2 - 1
    params = [t for t in (w1, w2, b1, b2) if t is not None]

    def loop():
        xs = x.clone().requires_grad_()
        outs = []
        for e, rows in enumerate(torch.split(xs, counts)):
            hdn = F.gelu(F.linear(rows, w1[e], b1[e, 0] if bias else None), approximate="tanh")
            outs.append(F.linear(hdn, w2[e], b2[e, 0] if bias else None))
        torch.cat(outs).backward(dy)

    def bmm():
        xs = x.clone().requires_grad_()
        padded = torch.zeros(E, m, h)
        for e, rows in enumerate(torch.split(xs, counts)):
            padded[e, : counts[e]] = rows
        w1t, w2t = w1.transpose(1, 2), w2.transpose(1, 2)
        hdn = F.gelu(torch.baddbmm(b1, padded, w1t) if bias else torch.bmm(padded, w1t), approximate="tanh")
        y = torch.baddbmm(b2, hdn, w2t) if bias else torch.bmm(hdn, w2t)
        torch.cat([y[e, : counts[e]] for e in range(E)]).backward(dy)

    def timed(fn):
        for t in params:
            t.grad = None
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    loop(), bmm()  # warm-up
    a_ms, b_ms = [], []
    for _ in range(a.reps):
        a_ms.append(timed(loop))
        b_ms.append(timed(bmm))
    med = lambda v: sorted(v)[len(v) // 2]
    print(f"RESULT loop_ms={med(a_ms):.3f} bmm_ms={med(b_ms):.3f}")


if __name__ == "__main__":
    main()
