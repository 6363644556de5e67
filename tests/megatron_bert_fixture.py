#!/usr/bin/python3
"""Megatron-LM BERT checkpoints for tests/megatron_bert_convert_cli.sh, written by PyTorch as Megatron's BertModel
saves them, and the loss of a plain PyTorch forward over their own tensors.

Makes the whole weights of a small pre-LN BERT (Megatron's BertModel: word, position and, with the binary head,
token-type embeddings; LayerNorm with biases, GELU; a final LayerNorm; the masked-LM head dense -> GELU ->
LayerNorm -> tied word embeddings + a vocabulary-parallel bias; the pooler's tanh dense over the first position
and the binary (sentence-order) head), splits them over tensor 2 x pipeline 2 ranks as tests/megatron_fixture.py
splits a GPT's (the LM head's bias by rows, as the output layer it is; its dense and norm, the pooler and the
binary head whole on the last stage), and writes one checkpoint per spec:

  legacy  --ckpt-format torch, the legacy BertModel's nested keys: language_model.{embedding.{word,position,
          tokentype}_embeddings, encoder.layers.N..., encoder.final_norm, pooler.dense}, lm_head.{dense, norm,
          bias}, binary_head, and word_embeddings_for_head on the last stage
  mcore   --ckpt-format torch, Megatron-Core's BertModel keys: embedding.*, encoder.layers.N...,
          encoder.final_layernorm, lm_head.{dense, layer_norm}, output_layer.{weight (the tied copy), bias},
          pooler.dense, binary_head
  dist    --ckpt-format torch_dist (PyTorch's own DCP writer): Megatron-Core's keys with the layers stacked under
          encoder.layers.* and each tensor rank's shard a chunk

usage: megatron_bert_fixture.py TOKENS TYPES MASK LABELS ORDER OUT_DIR=legacy|mcore|dist[,OPTION...] ...
  options: bf16 (weights stored as bfloat16; the reference uses the stored values), nohead (--bert-no-binary-head:
  no token types, pooler nor binary head), NAME=PYTHON_VALUE (change one saved arg after the weights are made)
Prints "OUT_DIR reference loss: X" per spec (the masked-LM mean cross-entropy over the labelled positions plus,
with the binary head, the sentence-order cross-entropy; float64).
"""
import argparse
import ast
import collections
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_fixture as mf  # noqa: E402  (the GPT fixture's splits, chunks and DCP writer)
import torch  # noqa: E402

ITERATION = 30


def make_weights(c, binary, gen):
    """Whole tensors under the GPT fixture's names (decoder.*) plus the BERT parts (Tessera's names)."""
    w = mf.make_weights(c, gen)
    h = c["hidden_size"]

    def randn(*shape, std=0.2):
        return torch.randn(*shape, generator=gen) * std
    if binary:
        w["embedding.tokentype_embeddings.weight"] = randn(2, h, std=0.3)
    w["lm_head.dense.weight"], w["lm_head.dense.bias"] = randn(h, h), randn(h, std=0.1)
    w["lm_head.layer_norm.weight"], w["lm_head.layer_norm.bias"] = 1 + randn(h, std=0.1), randn(h, std=0.1)
    w["output_layer.bias"] = randn(c["padded_vocab_size"], std=0.1)
    if binary:
        w["pooler.dense.weight"], w["pooler.dense.bias"] = randn(h, h), randn(h, std=0.1)
        w["binary_head.weight"], w["binary_head.bias"] = randn(2, h), randn(2, std=0.1)
    return w


def gelu(x):  # the tanh form (Tessera's; Megatron's fused bias-GELU)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def reference_loss(c, w, ids, types, mask, labels, order):
    """Megatron's pre-LN BertModel forward in float64 over whole tensors: padded keys are masked out."""
    w = {k: v.double() for k, v in w.items()}
    b, s = ids.shape
    h, heads, d = c["hidden_size"], c["num_attention_heads"], c["kv_channels"]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (h,), w[p + ".weight"], w[p + ".bias"], 1e-5)

    def linear(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    x = w["embedding.word_embeddings.weight"][ids] + w["embedding.position_embeddings.weight"][torch.arange(s)]
    if "embedding.tokentype_embeddings.weight" in w:
        x = x + w["embedding.tokentype_embeddings.weight"][types]
    masked = (mask == 0)[:, None, None, :]
    for i in range(c["num_layers"]):
        p = f"decoder.layers.{i}."
        y = ln(x, p + "input_layernorm")
        qkv = linear(y, p + "self_attention.linear_qkv").view(b, s, heads, 3, d)  # per head: q, k, v
        q, k, v = (qkv[:, :, :, j].permute(0, 2, 1, 3) for j in range(3))
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(masked, float("-inf"))
        ctx = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, s, heads * d)
        x = x + linear(ctx, p + "self_attention.linear_proj")
        y = ln(x, p + "pre_mlp_layernorm")
        x = x + linear(gelu(linear(y, p + "mlp.linear_fc1")), p + "mlp.linear_fc2")
    x = ln(x, "decoder.final_layernorm")
    t = ln(gelu(linear(x, "lm_head.dense")), "lm_head.layer_norm")
    logits = t @ w["embedding.word_embeddings.weight"].T + w["output_layer.bias"]
    loss = torch.nn.functional.cross_entropy(logits.reshape(b * s, -1), labels.reshape(-1), ignore_index=-1)
    if "binary_head.weight" in w:
        pooled = torch.tanh(linear(x[:, 0], "pooler.dense"))
        loss = loss + torch.nn.functional.cross_entropy(linear(pooled, "binary_head"), order)
    return loss.item()


def shard(name, t, c, rank, dtype):
    part = t.chunk(mf.TP, dim=0)[rank] if name == "output_layer.bias" else mf.split(name, t, c, rank)
    return part.to(dtype).clone()


def bert_mcore_extras(w, rank, first, last, dtype, c):
    """The BERT parts of one chunk at tensor rank `rank`, under Megatron-Core's names."""
    out = collections.OrderedDict()
    if first and "embedding.tokentype_embeddings.weight" in w:
        out["embedding.tokentype_embeddings.weight"] = w["embedding.tokentype_embeddings.weight"].to(dtype).clone()
    if last:
        for name in ("pooler.dense.weight", "pooler.dense.bias", "lm_head.dense.weight", "lm_head.dense.bias",
                     "lm_head.layer_norm.weight", "lm_head.layer_norm.bias", "output_layer.bias",
                     "binary_head.weight", "binary_head.bias"):
            if name in w:
                out[name] = shard(name, w[name], c, rank, dtype)
    return out


def legacy_chunk(c, w, rank, layers, first, last, dtype):
    gpt = mf.chunk_state(c, w, "legacy", rank, layers, first, last, dtype)
    extras = bert_mcore_extras(w, rank, first, last, dtype, c)
    lm = gpt["language_model"]
    if "embedding.tokentype_embeddings.weight" in extras:
        lm["embedding"]["tokentype_embeddings"] = collections.OrderedDict(
            weight=extras["embedding.tokentype_embeddings.weight"])
    if last:
        if "pooler.dense.weight" in extras:  # the legacy Pooler lives in the language model
            lm["pooler"] = collections.OrderedDict(
                [("dense.weight", extras["pooler.dense.weight"]), ("dense.bias", extras["pooler.dense.bias"])])
        gpt["lm_head"] = collections.OrderedDict(
            [("bias", extras["output_layer.bias"]), ("dense.weight", extras["lm_head.dense.weight"]),
             ("dense.bias", extras["lm_head.dense.bias"]), ("norm.weight", extras["lm_head.layer_norm.weight"]),
             ("norm.bias", extras["lm_head.layer_norm.bias"])])
        if "binary_head.weight" in extras:
            gpt["binary_head"] = collections.OrderedDict(
                [("weight", extras["binary_head.weight"]), ("bias", extras["binary_head.bias"])])
    return gpt


def mcore_chunk(c, w, rank, layers, first, last, dtype):
    gpt = mf.chunk_state(c, w, "mcore", rank, layers, first, last, dtype)
    out = collections.OrderedDict()
    for key, t in gpt.items():
        out["encoder." + key[len("decoder."):] if key.startswith("decoder.") else key] = t
    out.update(bert_mcore_extras(w, rank, first, last, dtype, c))
    return out


def dist_items(c, w, dtype):
    ranks = mf.torch_dist_items(c, w, "mcore", dtype, False)
    ranks = [[("encoder." + k[len("decoder."):] if k.startswith("decoder.") else k, *rest) for k, *rest in items]
             for items in ranks]
    last = (mf.PP - 1) * mf.TP
    for name, t in w.items():
        if name == "embedding.tokentype_embeddings.weight":
            ranks[0].append((name, list(t.shape), [0] * t.dim(), t.to(dtype).clone()))
        elif name == "output_layer.bias":
            rows = t.shape[0] // mf.TP
            for r in range(mf.TP):
                ranks[last + r].append((name, list(t.shape), [r * rows], shard(name, t, c, r, dtype)))
        elif name.split(".")[0] in ("lm_head", "pooler", "binary_head"):
            ranks[last].append((name, list(t.shape), [0] * t.dim(), t.to(dtype).clone()))
    return ranks


def write(out, kind, options, inputs):
    mf.TP, mf.PP = 2, 2
    dtype = torch.bfloat16 if "bf16" in options else torch.float32
    binary = "nohead" not in options
    c = mf.config("gpt2")
    w = make_weights(c, binary, torch.Generator().manual_seed(11))
    w = {k: v.to(dtype).float() for k, v in w.items()}  # the reference sees what the files hold
    loss = reference_loss(c, w, *inputs) if binary else reference_loss(c, w, *inputs[:4], None)

    saved = dict(c)
    saved.update(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, bert_binary_head=binary,
                 norm_epsilon=1e-5, num_experts=None, bias_gelu_fusion=True, openai_gelu=False, hidden_dropout=0.1,
                 attention_dropout=0.1, tokenizer_type="NullTokenizer", consumed_train_samples=960, seed=1234,
                 fp16=False, bf16=dtype == torch.bfloat16, iteration=ITERATION,
                 ckpt_format="torch_dist" if kind == "dist" else "torch")
    for item in options:
        if "=" in item:
            name, value = item.split("=", 1)
            saved[name] = ast.literal_eval(value)
    args = argparse.Namespace(**saved)
    sub = f"iter_{ITERATION:07d}"
    if kind == "dist":
        mf.write_dcp(os.path.join(out, sub), dist_items(c, w, dtype))
        torch.save({"args": args, "checkpoint_version": 3.0, "iteration": ITERATION},
                   os.path.join(out, sub, "common.pt"))
        with open(os.path.join(out, sub, "metadata.json"), "w") as f:
            f.write('{"sharded_backend": "torch_dist", "sharded_backend_version": 1, '
                    '"common_backend": "torch", "common_backend_version": 1}')
    else:
        per_stage = c["num_layers"] // mf.PP
        for stage in range(mf.PP):
            for rank in range(mf.TP):
                layers = list(range(stage * per_stage, (stage + 1) * per_stage))
                chunk = (legacy_chunk if kind == "legacy" else mcore_chunk)(c, w, rank, layers, stage == 0,
                                                                             stage == mf.PP - 1, dtype)
                d = os.path.join(out, sub, f"mp_rank_{rank:02d}_{stage:03d}")
                os.makedirs(d, exist_ok=True)
                torch.save({"args": args, "checkpoint_version": 3.0, "iteration": ITERATION, "model": chunk},
                           os.path.join(d, "model_optim_rng.pt"))
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(ITERATION))
    return loss


def main():
    # Positional only: argparse would take the labels ("-1,4,...") for an option.
    if len(sys.argv) < 7:
        sys.exit(__doc__.split("usage: ")[1].split("\n")[0])
    tokens, types, mask, labels, order, *specs = sys.argv[1:]

    def ints(text):
        return torch.tensor([int(x) for x in text.split(",")])
    ids = ints(tokens).reshape(2, -1)
    inputs = (ids, ints(types).reshape(ids.shape), ints(mask).reshape(ids.shape), ints(labels).reshape(ids.shape),
              ints(order))
    for spec in specs:
        out, _, rest = spec.partition("=")
        kind, *options = rest.split(",")
        if kind not in ("legacy", "mcore", "dist"):
            sys.exit(f"bad spec {spec}")
        print(f"{out} reference loss: {write(out, kind, options, inputs):.12e}")


if __name__ == "__main__":
    main()
