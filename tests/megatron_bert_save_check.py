#!/usr/bin/python3
"""Checks a BERT written by `tessera convert --saver megatron` at tensor 2 x pipeline 2 with PyTorch itself
(tests/megatron_bert_convert_cli.sh): every rank's model_optim_rng.pt loads with torch.load and holds exactly the
keys and shapes Megatron's BertModel has at that rank for the test's model (4 layers, hidden 32, 4 heads, ffn 128,
a vocabulary of 41 padded to 64, the binary head): Megatron-Core's names (encoder.layers.N, lm_head.layer_norm,
output_layer.{weight: the last stage's tied copy, bias}, binary_head, pooler.dense) or the legacy model's
(language_model.{embedding, encoder, pooler}, lm_head.{dense, norm, bias}, binary_head, word_embeddings_for_head),
with args.bert_binary_head set.

usage: megatron_bert_save_check.py MEGATRON_DIR mcore|legacy
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron_rng_check import check_rng_state  # noqa: E402

H, FFN, VOCAB, TP, PP, PER_STAGE, POSITIONS = 32, 128, 64, 2, 2, 2, 16
LEGACY_LAYER = {"input_layernorm.": "input_norm.", "pre_mlp_layernorm.": "post_attention_norm.",
                "self_attention.linear_qkv.": "self_attention.query_key_value.",
                "self_attention.linear_proj.": "self_attention.dense.", "mlp.linear_fc1.": "mlp.dense_h_to_4h.",
                "mlp.linear_fc2.": "mlp.dense_4h_to_h."}


def expected(stage):
    """Megatron-Core BertModel's keys and shard shapes on a rank of `stage`."""
    e = {}
    if stage == 0:
        e.update({"embedding.word_embeddings.weight": [VOCAB // TP, H], "embedding.position_embeddings.weight":
                  [POSITIONS, H], "embedding.tokentype_embeddings.weight": [2, H]})
    for j in range(PER_STAGE):
        for name, shape in (("input_layernorm.weight", [H]), ("input_layernorm.bias", [H]),
                            ("self_attention.linear_qkv.weight", [3 * H // TP, H]),
                            ("self_attention.linear_qkv.bias", [3 * H // TP]),
                            ("self_attention.linear_proj.weight", [H, H // TP]), ("self_attention.linear_proj.bias", [H]),
                            ("pre_mlp_layernorm.weight", [H]), ("pre_mlp_layernorm.bias", [H]),
                            ("mlp.linear_fc1.weight", [FFN // TP, H]), ("mlp.linear_fc1.bias", [FFN // TP]),
                            ("mlp.linear_fc2.weight", [H, FFN // TP]), ("mlp.linear_fc2.bias", [H])):
            e[f"encoder.layers.{j}.{name}"] = shape
    if stage == PP - 1:
        e.update({"encoder.final_layernorm.weight": [H], "encoder.final_layernorm.bias": [H],
                  "lm_head.dense.weight": [H, H], "lm_head.dense.bias": [H], "lm_head.layer_norm.weight": [H],
                  "lm_head.layer_norm.bias": [H], "output_layer.weight": [VOCAB // TP, H],
                  "output_layer.bias": [VOCAB // TP], "binary_head.weight": [2, H], "binary_head.bias": [2],
                  "pooler.dense.weight": [H, H], "pooler.dense.bias": [H]})
    return e


def legacy(key):
    """The legacy BertModel's (flattened) key of a Megatron-Core one."""
    if key.startswith("embedding.") or key.startswith("pooler."):
        return "language_model." + key
    if key.startswith("encoder.layers."):
        n, rest = key.split(".", 3)[2:]
        for new, old in LEGACY_LAYER.items():
            if rest.startswith(new):
                rest = old + rest[len(new):]
        return f"language_model.encoder.layers.{n}.{rest}"
    if key.startswith("encoder.final_layernorm."):
        return "language_model.encoder.final_norm." + key.split(".")[-1]
    if key.startswith("lm_head.layer_norm."):
        return "lm_head.norm." + key.split(".")[-1]
    return {"output_layer.weight": "word_embeddings_for_head.weight", "output_layer.bias": "lm_head.bias"}.get(key, key)


def flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, prefix + k + ".")
        else:
            yield prefix + k, v


def main():
    root, names = sys.argv[1], sys.argv[2]
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        iteration = int(f.read().strip())
    checked = 0
    for stage in range(PP):
        for rank in range(TP):
            path = os.path.join(root, f"iter_{iteration:07d}", f"mp_rank_{rank:02d}_{stage:03d}", "model_optim_rng.pt")
            state = torch.load(path, map_location="cpu")
            got = {k: list(v.shape) for k, v in flat(state["model"])}
            want = {(legacy(k) if names == "legacy" else k): s for k, s in expected(stage).items()}
            if got != want:
                extra = {k: got[k] for k in got.keys() - want.keys()}
                missing = {k: want[k] for k in want.keys() - got.keys()}
                wrong = {k: (got[k], want[k]) for k in got.keys() & want.keys() if got[k] != want[k]}
                sys.exit(f"FAIL: {path}: extra {extra}, missing {missing}, shapes (got, expected) {wrong}")
            if state["args"].bert_binary_head is not True or state["args"].padded_vocab_size != VOCAB:
                sys.exit(f"FAIL: {path}: args.bert_binary_head {state['args'].bert_binary_head}, "
                         f"padded_vocab_size {state['args'].padded_vocab_size}")
            try:
                check_rng_state(state["rng_state"], state["args"].seed, stage, rank, where=path)
            except AssertionError as e:
                sys.exit(f"FAIL: {e}")
            checked += len(got)
    print(f"torch {torch.__version__}: {TP * PP} files, {checked} tensors with Megatron's BertModel keys and shapes, "
          "each rng_state as Megatron seeds that rank")


if __name__ == "__main__":
    main()
