#!/usr/bin/python3
"""A Megatron-LM legacy checkpoint of a DeepSeek-V3-style GPT for tests/megatron_deepseek_convert_cli.sh, made by
PyTorch from the weights of a Tessera checkpoint, so that converting it back must give the same model.

Writes iter_N/mp_rank_TT_PPP/model_optim_rng.pt at tensor 2 x pipeline 2 as Megatron-Core's ranks hold the model
with Transformer Engine's spec: multi-latent attention (linear_q_down_proj and linear_kv_down_proj whole on every
rank, linear_q_up_proj / linear_kv_up_proj split by heads with the latents' norms fused in as their
layer_norm_weight, linear_proj by columns), a dense first layer (its pre-MLP norm fused into linear_fc1), a MoE
layer (router.weight and expert_bias whole, each expert and the shared expert split as a dense MLP), and one
multi-token prediction module on the last stage (mtp.layers.0.{enorm,hnorm,eh_proj (by rows),transformer_layer.*,
final_layernorm}), which also holds its own copy of the word embeddings, as Megatron's last stage does with MTP.
Adam's moments as Megatron-Core's ChainedOptimizer saves them for a mixture of experts: [the dense parameters'
torch optimizer state dict, the experts'], each numbering its parameters group by group. The router's expert_bias
(and local_tokens_per_expert, a persistent buffer before Megatron-Core 0.11, zero at a save) are buffers outside
the optimizer: Megatron moves the bias itself after each step from the tokens each expert got.

usage: megatron_deepseek_fixture.py TESSERA_DIR OUT_DIR
"""
import argparse
import collections
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import megatron_resume_fixture as rf  # noqa: E402
import torch  # noqa: E402

TP, PP = 2, 2

# Transformer Engine fuses these norms into the linear layer after them (a MoE layer's pre-MLP norm stays
# apart: the router and the experts both read it).
FUSED = {"self_attention.q_layernorm.weight": "self_attention.linear_q_up_proj.layer_norm_weight",
         "self_attention.kv_layernorm.weight": "self_attention.linear_kv_up_proj.layer_norm_weight"}
ROWS = ("linear_q_up_proj.weight", "linear_kv_up_proj.weight", "linear_q_proj.weight", "eh_proj.weight")


def shard(name, t, rank):
    """Tensor rank `rank`'s shard of the whole tensor `t` (SwiGLU's fc1: its rows of the gate and of the up)."""
    if name in ("embedding.word_embeddings.weight", "output_layer.weight") or name.endswith(ROWS):
        return t.chunk(TP, dim=0)[rank]
    if name.endswith("linear_fc1.weight"):
        gate, up = t.chunk(2, dim=0)
        return torch.cat([gate.chunk(TP, dim=0)[rank], up.chunk(TP, dim=0)[rank]], dim=0)
    if name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
        return t.chunk(TP, dim=1)[rank]
    return t


def layer_key(rest, dense):
    if dense and rest == "pre_mlp_layernorm.weight":
        return "mlp.linear_fc1.layer_norm_weight"
    return FUSED.get(rest, rest)


def megatron_key(name, stage_first_layer, dense_layers):
    """Megatron's key for a Tessera name, its layer numbered within the stage, or None (not on this stage)."""
    parts = name.split(".")
    if parts[0] == "decoder" and parts[1] == "layers":
        n = int(parts[2])
        return f"decoder.layers.{n - stage_first_layer}." + layer_key(".".join(parts[3:]), n in dense_layers)
    if name.startswith("mtp.layers.") and ".transformer_layer." in name:
        head, rest = name.split(".transformer_layer.")
        return f"{head}.transformer_layer." + layer_key(rest, False)  # the module's layer is the last (MoE) one's
    return name


def torch_optimizer(params, steps):
    """A torch optimizer state dict over `params` [(key, weight, exp_avg, exp_avg_sq)] in named_parameters order,
    numbered group by group as Megatron-Core's _get_param_groups builds them (the groups in the order it first
    meets them: decayed weights, and biases and 1-D tensors without decay)."""
    decayed = [i for i, (k, t, _, _) in enumerate(params) if not (k.endswith(".bias") or t.dim() == 1)]
    rest = [i for i in range(len(params)) if i not in decayed]
    groups = [(decayed, 1.0), (rest, 0.0)] if 0 in decayed else [(rest, 0.0), (decayed, 1.0)]
    state, param_groups, n = {}, [], 0
    for members, wd_mult in groups:
        ids = []
        for i in members:
            state[n] = {"exp_avg": params[i][2], "exp_avg_sq": params[i][3], "step": torch.tensor(float(steps))}
            ids.append(n)
            n += 1
        param_groups.append({"params": ids, "lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                             "weight_decay": 0.01 * wd_mult, "wd_mult": wd_mult, "lr_mult": 1.0})
    return {"state": state, "param_groups": param_groups}


def read_model(tessera):
    """The Tessera checkpoint's latest iteration, index, weights, moments, Megatron args (the legacy format's) and
    dense layers."""
    iteration, index, w, avg, sq = rf.read_tessera(tessera)
    with open(os.path.join(tessera, f"iter_{iteration:07d}", "index.json")) as f:
        m = json.load(f)["args"]["model"]
    L = m["num_layers"]
    mo = m["moe"]
    dense_layers = {i for i, e in enumerate(mo["layer_experts"][:L]) if e == 0}
    args = argparse.Namespace(
        num_layers=L, hidden_size=m["hidden_size"], ffn_hidden_size=m["ffn_hidden_size"],
        num_attention_heads=m["num_attention_heads"], kv_channels=m["kv_channels"], group_query_attention=False,
        seq_length=m["seq_length"], max_position_embeddings=m["max_position_embeddings"],
        position_embedding_type="rope", rotary_base=m["rotary_base"], rotary_percent=1.0, rotary_interleaved=False,
        normalization="RMSNorm", norm_epsilon=m["norm_epsilon"], swiglu=True, add_bias_linear=False,
        untie_embeddings_and_output_weights=True, qk_layernorm=True, hidden_dropout=0.0, attention_dropout=0.0,
        multi_latent_attention=True, q_lora_rank=m["mla"]["q_lora_rank"] or None, kv_lora_rank=m["mla"]["kv_lora_rank"],
        qk_head_dim=m["mla"]["qk_head_dim"], qk_pos_emb_head_dim=m["mla"]["qk_pos_emb_head_dim"],
        v_head_dim=m["mla"]["v_head_dim"], rope_type="yarn", rotary_scaling_factor=m["mla"]["rotary_scaling_factor"],
        mscale=m["mla"]["mscale"], mscale_all_dim=m["mla"]["mscale_all_dim"], beta_fast=m["mla"]["beta_fast"],
        beta_slow=m["mla"]["beta_slow"], original_max_position_embeddings=m["mla"]["original_max_position_embeddings"],
        num_experts=max(mo["layer_experts"]), moe_layer_freq=[0 if i in dense_layers else 1 for i in range(L)],
        moe_ffn_hidden_size=mo["moe_ffn_hidden_size"], moe_router_topk=mo["moe_router_topk"],
        moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
        moe_router_num_groups=mo["moe_router_num_groups"], moe_router_group_topk=mo["moe_router_group_topk"],
        moe_router_topk_scaling_factor=mo["moe_router_topk_scaling_factor"], moe_router_pre_softmax=False,
        moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0,
        moe_shared_expert_intermediate_size=mo["moe_shared_expert_intermediate_size"],
        expert_model_parallel_size=1, mtp_num_layers=m["mtp_num_layers"], mtp_loss_scaling_factor=0.1,
        tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP, virtual_pipeline_model_parallel_size=None,
        tokenizer_type="NullTokenizer", vocab_size=m["vocab_size"] - 1, padded_vocab_size=m["padded_vocab_size"],
        make_vocab_size_divisible_by=8, consumed_train_samples=index["consumed_train_samples"], seed=index["seed"],
        fp16=False, bf16=False, params_dtype=torch.float32, iteration=iteration, ckpt_format="torch")
    return iteration, index, w, avg, sq, args, dense_layers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tessera")
    p.add_argument("out")
    a = p.parse_args()
    iteration, index, w, avg, sq, args, dense_layers = read_model(a.tessera)
    per_stage = args.num_layers // PP
    for stage in range(PP):
        first, last = stage * per_stage, (stage + 1) * per_stage
        for rank in range(TP):
            model = collections.OrderedDict()
            dense, experts = [], []  # the chained optimizer's two lists of (key, weight, exp_avg, exp_avg_sq)
            for name, t in w.items():
                parts = name.split(".")
                if parts[0] == "decoder" and parts[1] == "layers" and not first <= int(parts[2]) < last:
                    continue
                on_last = name.startswith(("mtp.", "output_layer.", "decoder.final_layernorm."))
                if on_last and stage != PP - 1:
                    continue
                if name.startswith("embedding.") and stage != 0 and stage != PP - 1:
                    continue  # the first stage's, and with MTP the last stage's copy
                key = megatron_key(name, first, dense_layers)
                model[key] = shard(name, t, rank).clone()
                if key.endswith("mlp.router.expert_bias"):
                    # Megatron-Core before 0.11 kept the token counts as a persistent buffer too: zero at a save.
                    model[key.replace("expert_bias", "local_tokens_per_expert")] = torch.zeros_like(t)
                    continue
                moments = (key, model[key], shard(name, avg[name], rank).clone(), shard(name, sq[name], rank).clone())
                (experts if ".mlp.experts." in key else dense).append(moments)
            model["decoder.layers.0.self_attention.core_attention._extra_state"] = None
            d = os.path.join(a.out, f"iter_{iteration:07d}", f"mp_rank_{rank:02d}_{stage:03d}")
            os.makedirs(d, exist_ok=True)
            steps = index.get("optimizer_steps", iteration)
            optimizer = [torch_optimizer(dense, steps), torch_optimizer(experts, steps)]  # Megatron-Core's chained
            torch.save({"args": args, "checkpoint_version": 3.0, "iteration": iteration, "model": model,
                        "optimizer": optimizer, "opt_param_scheduler": {"num_steps": iteration * 4, "max_lr": 1e-3}},
                       os.path.join(d, "model_optim_rng.pt"))
    with open(os.path.join(a.out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    print(f"{a.out}: tensor {TP} x pipeline {PP}, {len(w)} tensors")


if __name__ == "__main__":
    main()
