// The flags of multi-token prediction (Megatron-Core's --mtp-num-layers, default none = off, and
// --mtp-loss-scaling-factor, default 0.1) bound to ModelConfig, and their rules: the modules sit on the
// last pipeline stage of a GPT and share its embedding and output layer (model/multi_token_prediction.h);
// what they do not run with yet is refused by name before any work.
#include <CLI/CLI.hpp>

#include <cmath>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;

void add_mtp_flags(CLI::App& app, TrainArguments& a) {
  app.add_option("--mtp-num-layers", a.model.mtp_num_layers,
                 "Multi-token prediction modules (DeepSeek-V3's MTP) after the last layer (left out: none)")
      ->default_str("");
  app.add_option("--mtp-loss-scaling-factor", a.model.mtp_loss_scaling_factor,
                 "Weight of the MTP losses' mean in the objective")
      ->capture_default_str();
}

void finalize_mtp_model(TrainArguments& a) {
  model::ModelConfig& c = a.model;
  require(c.mtp_num_layers >= 0, "--mtp-num-layers", c.mtp_num_layers, "must not be negative (0: no MTP)");
  require(std::isfinite(c.mtp_loss_scaling_factor) && c.mtp_loss_scaling_factor >= 0, "--mtp-loss-scaling-factor",
          c.mtp_loss_scaling_factor, "must be a finite number >= 0");
  if (c.mtp_num_layers == 0) return;
  const auto not_with = [&](bool ok, const std::string& what) {
    require(ok, "--mtp-num-layers", c.mtp_num_layers, str_cat("cannot be combined with ", what));
  };
  not_with(c.family == "gpt", str_cat("--model-family ", c.family, " (MTP predicts further tokens of a GPT)"));
  not_with(!a.kd, "--kd (the MTP modules share the output layer the distillation term is computed on)");
  // --context-parallel-size: the rolls cross the ranks' chunks (model/sequence_roll.h, issue 53).
  // --pipeline-token-slices: the modules run once over the whole sequence after the last slice's head
  // (model/sliced_multi_token_prediction.h); what slices do not run with is refused by their own rules.
  // Ouroboros: the modules run on its last module after the output layer, so their gradient is fresh like
  // the output layer's and their lookups of the tied embedding land in its fresh term; the driver carries
  // their mtp_k losses beside the LM loss across the ring and the replicas (train/ouroboros_driver.cc).
  // With learned absolute positions module K-1 holds a copy of the position embedding, which the driver
  // ties to module 0's as it ties the word embedding (the modules' lookups in the fresh term).
  // Each module's layer is built as the last one (Megatron's MTP spec): a mixture of experts when that is.
  if (c.moe.enabled() && static_cast<int64_t>(c.moe.layer_experts.size()) == c.num_layers)
    for (int64_t k = 0; k < c.mtp_num_layers; ++k) c.moe.layer_experts.push_back(c.moe.layer_experts.back());
  // Under --pipeline-model-parallel-size > 1 the last stage keeps its own copies of the word embedding
  // (untied) and of the learned absolute position embedding, summed with the first stage's over the
  // embedding group (model/gpt_model.cc's stage_copy), as Megatron-Core's embedding on an mtp_process stage.
}

}  // namespace tessera::train
