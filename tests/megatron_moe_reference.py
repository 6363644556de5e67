"""A float64 plain-PyTorch forward of Megatron-Core's MoE layer, written from Megatron's definitions
(TopKRouter with topk_softmax_with_capacity and group_limited_topk, SequentialMLP, SharedExpertMLP), for the
reference loss of tests/megatron_moe_fixture.py's checkpoints (tests/megatron_moe_convert_cli.sh):

  * softmax scores: the top k logits, then a softmax over those k (or with moe_router_pre_softmax, a softmax
    over all experts, then the top k);
  * sigmoid scores: sigmoid(logits); the expert bias (moe_router_enable_expert_bias) is added for the selection
    only; with groups (moe_router_num_groups, moe_router_group_topk) each group is scored by the sum of its
    top k / group_topk, the best group_topk groups kept and the top k taken among their experts; the chosen
    scores (without the bias) renormalised to sum 1 when k > 1;
  * times moe_router_topk_scaling_factor; each token's output the weighted sum of its experts' SwiGLU MLPs,
    plus the shared expert's (moe_shared_expert_intermediate_size) without a gate; no token dropped.

The model is tests/megatron_fixture.py's reference_loss, whose MLP this replaces in the MoE layers.
"""
import torch


def swiglu_mlp(fc1, fc2, y):
    gate, up = (y @ fc1.T).chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up) @ fc2.T


def moe_mlp(args, w, prefix, y, margins):
    """The MoE MLP of the layer whose names start with `prefix` ("decoder.layers.N.") on y [T, h], float64.
    Appends to `margins` the smallest gap between the k-th and the (k+1)-th selection score, and between the
    kept groups' lowest score and the next group's (ties make the choice, so the comparison, depend on
    rounding)."""
    k = args.moe_router_topk
    score = getattr(args, "moe_router_score_function", "softmax")
    logits = y @ w[prefix + "mlp.router.weight"].T  # [T, E]
    T, E = logits.shape
    if score == "sigmoid":
        scores = torch.sigmoid(logits)
        select = scores.clone()
        if getattr(args, "moe_router_enable_expert_bias", False):
            select = select + w[prefix + "mlp.router.expert_bias"]
    else:
        scores = torch.softmax(logits, dim=-1) if getattr(args, "moe_router_pre_softmax", False) else logits
        select = scores
    groups = getattr(args, "moe_router_num_groups", None)
    if groups:
        group_topk = args.moe_router_group_topk
        group_scores = select.view(T, groups, E // groups).topk(k // group_topk, dim=-1).values.sum(-1)
        if groups > group_topk:  # the groups' choice is a selection too
            ordered = group_scores.sort(dim=-1, descending=True).values
            margins.append((ordered[:, group_topk - 1] - ordered[:, group_topk]).min().item())
        kept = torch.zeros(T, groups, dtype=torch.bool)
        kept.scatter_(1, group_scores.topk(group_topk, dim=-1).indices, True)
        select = select.masked_fill(~kept.repeat_interleave(E // groups, dim=1), float("-inf"))
    ordered = select.sort(dim=-1, descending=True).values
    if E > k:
        gap = ordered[:, k - 1] - ordered[:, k]
        margins.append(gap[torch.isfinite(gap)].min().item() if torch.isfinite(gap).any() else float("inf"))
    top = select.topk(k, dim=-1).indices
    if score == "sigmoid":
        probs = scores.gather(1, top)
        if k > 1:
            probs = probs / (probs.sum(-1, keepdim=True) + 1e-20)
    elif getattr(args, "moe_router_pre_softmax", False):
        probs = scores.gather(1, top)
    else:
        probs = torch.softmax(logits.gather(1, top), dim=-1)
    scaling = getattr(args, "moe_router_topk_scaling_factor", None)
    if scaling:
        probs = probs * scaling
    out = torch.zeros_like(y)
    for t in range(T):
        for j in range(k):
            e = int(top[t, j])
            e_prefix = f"{prefix}mlp.experts.local_experts.{e}."
            out[t] += probs[t, j] * swiglu_mlp(w[e_prefix + "linear_fc1.weight"], w[e_prefix + "linear_fc2.weight"], y[t])
    if prefix + "mlp.shared_experts.linear_fc1.weight" in w:
        out = out + swiglu_mlp(w[prefix + "mlp.shared_experts.linear_fc1.weight"],
                               w[prefix + "mlp.shared_experts.linear_fc2.weight"], y)
    return out
