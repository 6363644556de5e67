#!/usr/bin/python3
"""The PyTorch peer of Tessera's throughput benchmarks: the same GPT-2 training step, written plainly.

Same model as `tessera train` with the benchmark's flags: pre-LN GPT-2 with learned positions,
LayerNorm, GELU (tanh approximation), tied input/output embeddings, biases everywhere, no dropout,
AdamW, gradient clipping at 1.0, vocabulary padded to a multiple of 128 (Megatron's
make-vocab-size-divisible-by). Tokens are random: the step costs the same whatever they are.

CPU (the default, bench/throughput.py): Debian's python3-torch 1.13 (/usr/bin/python3), fp32. nn.Linear
goes through the system BLAS (libblas.so.3), so which BLAS and which OpenBLAS kernel set is loaded
decides most of the speed; the script prints both so the comparison can be checked.

GPU (--device cuda, bench_gpu_train's peer in scripts/gpu_step2_check.sh): as one trains GPT-2 in
PyTorch 2: --bf16 autocast, attention through F.scaled_dot_product_attention(is_causal=True) where
torch has it (the explicit masked softmax otherwise; the header says which ran), --compile
(torch.compile), fused AdamW, the timers around torch.cuda.synchronize(). MFU uses Megatron's FLOP
count, the one bench_gpu_train uses (model::model_flops_per_iteration), against --peak-tflops (989,
the dense bf16 peak, on an H100 or H200 SXM; name it for another card).

Last lines (machine-readable; bench/throughput.py reads the first, gpu_step2_check.sh the second):
  TORCH_MS_PER_ITER=<median ms> iters=<timed> threads=<n> blas=<library> corename=<OpenBLAS core>
  TORCH_GPT device=<cpu|cuda> dtype=<fp32|bf16> attention=<sdpa|explicit> compiled=<0|1> mbs=<b> ms=<median>
    tokens_per_s=<n> tflops=<model TFLOP/s> mfu=<percent or -> peak_mem_mib=<MiB>
"""
import argparse
import ctypes
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# torch >= 2.0 has fused (flash / memory-efficient) attention; torch 1.13 has not.
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class Block(nn.Module):
    def __init__(self, h, heads, sdpa):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
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
        if self.sdpa:  # flash attention on a GPU (scale 1/sqrt(d), as below)
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(ctx.transpose(1, 2).reshape(b, s, h))
        # Without F.scaled_dot_product_attention (torch 1.13): the explicit causal softmax.
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(mask, float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ v  # [b, heads, s, d]
        return self.proj(ctx.transpose(1, 2).reshape(b, s, h))

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, heads, seq, vocab, sdpa):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads, sdpa) for _ in range(layers))
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


def model_flops_per_iteration(layers, h, seq, padded_vocab, batch):
    """Megatron's count (model::model_flops_per_iteration for a dense GPT with as many query groups as
    heads and a 4h feed-forward): 12 B S h^2 (L (1 + 1 + S/h) + 4 L + V / 2h), forward and backward,
    with the full (not causally halved) score matrices. GPT-2 124M at 8 x 1024: 7.0e12."""
    return 12.0 * batch * seq * h * h * (layers * (2.0 + seq / h) + 4.0 * layers + padded_vocab / (2.0 * h))


def default_peak_tflops(device_name):
    """The dense bf16 peak of the cards the device checks run on (as bench_gpu_train's default)."""
    return 989.0 if ("H100" in device_name or "H200" in device_name) else None


def fail(message):
    print(f"torch_gpt.py: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu (the default) or cuda / cuda:N")
    ap.add_argument("--threads", type=int, help="CPU threads (needed with --device cpu)")
    ap.add_argument("--num-layers", type=int, default=12)
    ap.add_argument("--hidden-size", type=int, default=768)
    ap.add_argument("--num-attention-heads", type=int, default=12)
    ap.add_argument("--seq-length", type=int, default=1024)
    ap.add_argument("--micro-batch-size", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=50256, help="as tessera's flag: +1 EOD, then padded")
    ap.add_argument("--iters", type=int, default=5, help="total iterations, including the warm-up")
    ap.add_argument("--warmup", type=int, default=1, help="leading iterations left out of the median")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 weights and optimizer state)")
    ap.add_argument("--attention", choices=["auto", "sdpa", "explicit"], default="auto",
                    help="auto: F.scaled_dot_product_attention where torch has it, else the explicit softmax")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2.0)")
    ap.add_argument("--peak-tflops", type=float, help="the MFU's denominator (default: 989 on an H100/H200)")
    ap.add_argument("--flops-only", action="store_true", help="print the FLOPs per iteration and stop")
    args = ap.parse_args()

    vocab = args.vocab_size + 1  # NullTokenizer: the EOD token comes on top
    padded = (vocab + 127) // 128 * 128  # 50257 -> 50304
    b, s = args.micro_batch_size, args.seq_length
    flops = model_flops_per_iteration(args.num_layers, args.hidden_size, s, padded, b)
    if args.flops_only:
        print(f"MODEL_FLOPS_PER_ITER={flops:.6e}")
        return
    if args.iters < 1 or args.warmup < 0:
        fail(f"--iters ({args.iters}) must be positive and --warmup ({args.warmup}) not negative")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if device.type not in ("cpu", "cuda"):
        fail(f"--device {args.device} is not cpu or cuda")
    if cuda and not torch.cuda.is_available():
        fail(f"--device {args.device}: torch {torch.__version__} sees no CUDA device "
             f"(built with CUDA {torch.version.cuda})")
    if not cuda and args.threads is None:
        fail("--threads is needed with --device cpu")
    if args.attention == "sdpa" and not HAS_SDPA:
        fail(f"--attention sdpa: torch {torch.__version__} has no F.scaled_dot_product_attention (torch >= 2.0)")
    if args.compile and not hasattr(torch, "compile"):
        fail(f"--compile: torch {torch.__version__} has no torch.compile (torch >= 2.0)")
    sdpa = args.attention == "sdpa" or (args.attention == "auto" and HAS_SDPA)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    if cuda:
        torch.cuda.set_device(device)
        # Matmuls outside autocast (none in bf16; all of them in fp32) may use TF32, as PyTorch
        # training scripts set; Tessera's fp32 path uses cuBLASLt's default there too.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    model = GPT(args.num_layers, args.hidden_size, args.num_attention_heads, s, padded, sdpa).to(device)
    # Megatron's default weight decay 0.01 on everything; betas/eps as Megatron's defaults. On a GPU the
    # fused (one launch) AdamW where torch has it.
    adamw = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    fused = False
    if cuda:
        try:
            opt = torch.optim.AdamW(model.parameters(), fused=True, **adamw)
            fused = True
        except (TypeError, RuntimeError):  # torch < 2.0: no fused AdamW
            opt = torch.optim.AdamW(model.parameters(), **adamw)
    else:
        opt = torch.optim.AdamW(model.parameters(), **adamw)
    step_model = torch.compile(model) if args.compile else model
    data = torch.randint(0, vocab, (b, s + 1))
    tokens, labels = data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)
    params = sum(p.numel() for p in model.parameters())
    dtype = "bf16" if args.bf16 else "fp32"
    attention = "sdpa" if sdpa else "explicit"
    if cuda:
        name = torch.cuda.get_device_name(device)
        lib, core = "cuda", "-"
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}) on "
              f"{name}, parameters {params}")
    else:
        name = "cpu"
        lib, core = blas_info()
        print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, BLAS {lib} (core {core}), "
              f"parameters {params}")
    peak = args.peak_tflops if args.peak_tflops is not None else (default_peak_tflops(name) if cuda else None)
    print(f"{dtype}, attention {attention} ({'F.scaled_dot_product_attention, causal' if sdpa else 'explicit masked softmax'}), "
          f"{'torch.compile' if args.compile else 'eager'}, AdamW {'fused' if fused else 'per-tensor'}, "
          f"micro-batch {b} x {s}, {flops:.3e} FLOPs per iteration")

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    times = []
    for it in range(args.iters):
        sync()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = step_model(tokens, labels)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        times.append((time.perf_counter() - t) * 1000)
        # The loss is read after the timer stops: its copy to the host would synchronise the step.
        print(f"iteration {it + 1}/{args.iters} | elapsed time per iteration (ms): {times[-1]:.1f} | "
              f"lm loss: {loss.item():.6E} | grad norm: {grad_norm.item():.3f}", flush=True)

    timed = times[args.warmup:] or times
    ms = statistics.median(timed)
    if cuda:
        peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
    else:  # the process's peak resident memory (KiB on Linux)
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tflops = flops / (ms / 1e3) / 1e12
    mfu = f"{100 * tflops / peak:.2f}" if peak else "-"
    print(f"TORCH_MS_PER_ITER={ms:.1f} iters={len(timed)} "
          f"threads={torch.get_num_threads()} blas={lib} corename={core}")
    print(f"TORCH_GPT device={device.type} dtype={dtype} attention={attention} compiled={int(args.compile)} "
          f"mbs={b} ms={ms:.2f} tokens_per_s={b * s / (ms / 1e3):.0f} tflops={tflops:.2f} mfu={mfu} "
          f"peak_mem_mib={peak_mib:.0f}")


if __name__ == "__main__":
    main()
