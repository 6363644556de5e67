#!/usr/bin/python3
"""The PyTorch peer of Tessera's throughput benchmark: the same GPT-2 training step, written plainly.

Same model as `tessera train` with the benchmark's flags: pre-LN GPT-2 with learned positions,
LayerNorm, GELU (tanh approximation), tied input/output embeddings, biases everywhere, no dropout,
fp32, AdamW, gradient clipping at 1.0, vocabulary padded to a multiple of 128 (Megatron's
make-vocab-size-divisible-by). Tokens are random: the step costs the same whatever they are.

Meant for Debian's python3-torch 1.13 (/usr/bin/python3). On CPU, nn.Linear goes through the system
BLAS (libblas.so.3), so which BLAS and which OpenBLAS kernel set is loaded decides most of the speed;
the script prints both so the comparison can be checked.

Last line (machine-readable):
  TORCH_MS_PER_ITER=<median ms> iters=<timed> threads=<n> blas=<library> corename=<OpenBLAS core>
"""
import argparse
import ctypes
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def attention(self, x, mask):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d).permute(2, 0, 3, 1, 4)  # 3 x [b, heads, s, d]
        # torch 1.13 has no F.scaled_dot_product_attention (it arrived in 2.0): explicit causal softmax.
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(mask, float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ v  # [b, heads, s, d]
        return self.proj(ctx.transpose(1, 2).reshape(b, s, h))

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        # True above the diagonal: the positions a token may not attend to.
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))
        for name, p in self.named_parameters():  # Megatron's init: N(0, 0.02), zero biases, LN = 1/0
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, labels):
        s = tokens.shape[1]
        x = self.wte(tokens) + self.wpe.weight[:s]
        for blk in self.blocks:
            x = blk(x, self.mask[:s, :s])
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied output layer, no bias
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def blas_info():
    """The BLAS library torch loaded and, for OpenBLAS, the kernel set it runs."""
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "blas" in line.split()[-1]})
    if not libs:
        return "none", "-"
    lib = libs[0]
    try:
        so = ctypes.CDLL(lib)
        so.openblas_get_corename.restype = ctypes.c_char_p
        return lib, so.openblas_get_corename().decode()
    except (OSError, AttributeError):  # not OpenBLAS: the reference BLAS has no such symbol
        return lib, "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--num-layers", type=int, default=12)
    ap.add_argument("--hidden-size", type=int, default=768)
    ap.add_argument("--num-attention-heads", type=int, default=12)
    ap.add_argument("--seq-length", type=int, default=1024)
    ap.add_argument("--micro-batch-size", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=50256, help="as tessera's flag: +1 EOD, then padded")
    ap.add_argument("--iters", type=int, default=5, help="total iterations, including the warm-up")
    ap.add_argument("--warmup", type=int, default=1, help="leading iterations left out of the median")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    vocab = args.vocab_size + 1  # NullTokenizer: the EOD token comes on top
    padded = (vocab + 127) // 128 * 128  # 50257 -> 50304
    b, s = args.micro_batch_size, args.seq_length

    model = GPT(args.num_layers, args.hidden_size, args.num_attention_heads, s, padded)
    # Megatron's default weight decay 0.01 on everything; betas/eps as Megatron's defaults.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    data = torch.randint(0, vocab, (b, s + 1))
    tokens, labels = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    lib, core = blas_info()
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, BLAS {lib} (core {core}), "
          f"parameters {params}")

    times = []
    for it in range(args.iters):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, labels)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t) * 1000)
        print(f"iteration {it + 1}/{args.iters} | elapsed time per iteration (ms): {times[-1]:.1f} | "
              f"lm loss: {loss.item():.6E} | grad norm: {grad_norm.item():.3f}", flush=True)

    timed = times[args.warmup:] or times
    print(f"TORCH_MS_PER_ITER={statistics.median(timed):.1f} iters={len(timed)} "
          f"threads={torch.get_num_threads()} blas={lib} corename={core}")


if __name__ == "__main__":
    main()
