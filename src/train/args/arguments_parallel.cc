// The rules of the parallel layout: how the model is cut over tensor- and pipeline-parallel ranks,
// what backward recomputes, and how gradients and parameters travel between data-parallel ranks.
#include <algorithm>
#include <utility>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

pipeline::ScheduleShape schedule_shape(const TrainArguments& a, int64_t micro_batches) {
  pipeline::ScheduleShape s{static_cast<int>(a.pipeline_model_parallel_size), static_cast<int>(micro_batches),
                            static_cast<int>(a.virtual_pipeline_size)};
  s.zero_bubble = a.zero_bubble;
  s.max_pending_weight_passes = static_cast<int>(a.zero_bubble_max_pending_backward);
  return s;
}

namespace {

// --enable-zero-bubble, --zero-bubble-v-schedule (ZB-V implies zero bubble) and the schedules they cannot
// be combined with, after the virtual stages are known.
void finalize_zero_bubble(TrainArguments& a) {
  const char* flag = a.zero_bubble_v_schedule ? "--zero-bubble-v-schedule" : "--enable-zero-bubble";
  require(a.zero_bubble_max_pending_backward >= 0, "--zero-bubble-max-pending-backward",
          a.zero_bubble_max_pending_backward, "must not be negative (0: bounded by memory only)");
  require(a.zero_bubble_timers_start_iter >= 0, "--zero-bubble-pipeline-timers-start-iter",
          a.zero_bubble_timers_start_iter, "must not be negative");
  require(a.zero_bubble_timers_end_iter > a.zero_bubble_timers_start_iter, "--zero-bubble-pipeline-timers-end-iter",
          a.zero_bubble_timers_end_iter,
          str_cat("must be above --zero-bubble-pipeline-timers-start-iter=", a.zero_bubble_timers_start_iter));
  if (!a.enable_zero_bubble && !a.zero_bubble_v_schedule) {
    require(a.zero_bubble_max_pending_backward == 0, "--zero-bubble-max-pending-backward",
            a.zero_bubble_max_pending_backward, "needs --enable-zero-bubble or --zero-bubble-v-schedule");
    return;
  }
  TESSERA_CHECK(a.pipeline_schedule == "1f1b", flag, " cannot be combined with --pipeline-schedule ",
                a.pipeline_schedule);
  TESSERA_CHECK(a.virtual_pipeline_size == 1, flag, " cannot be combined with the interleaved schedule "
                "(--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank); ZB-V places its "
                "two chunks per rank itself");
  TESSERA_CHECK(a.pipeline_token_slices.empty(), flag, " cannot be combined with --pipeline-token-slices");
  TESSERA_CHECK(!a.zero_bubble_v_schedule || a.pipeline_model_parallel_size > 1, flag,
                " needs --pipeline-model-parallel-size > 1");
  a.zero_bubble = a.zero_bubble_v_schedule ? pipeline::ZeroBubble::V : pipeline::ZeroBubble::H1;
  if (a.zero_bubble == pipeline::ZeroBubble::V) a.virtual_pipeline_size = 2;
}

}  // namespace

void finalize_parallel_layout(TrainArguments& a) {
  const model::ModelConfig& c = a.model;
  const int64_t tp = a.tensor_model_parallel_size;
  require_positive("--tensor-model-parallel-size", tp);
  const int64_t pp = a.pipeline_model_parallel_size;
  require_positive("--pipeline-model-parallel-size", pp);
  // Megatron-Core's uneven split: given layers on the first and/or last stage, the rest even.
  for (const auto& [flag, value] : {std::pair{"--decoder-first-pipeline-num-layers", a.decoder_first_pipeline_num_layers},
                                    std::pair{"--decoder-last-pipeline-num-layers", a.decoder_last_pipeline_num_layers}})
    require(value == -1 || value >= 1, flag, value, "must be positive");
  a.layer_split = {static_cast<int>(c.num_layers), static_cast<int>(a.decoder_first_pipeline_num_layers),
                   static_cast<int>(a.decoder_last_pipeline_num_layers), a.account_for_embedding_in_pipeline_split,
                   a.account_for_loss_in_pipeline_split};
  const bool uneven = a.layer_split.uneven(), accounts = a.layer_split.accounts();
  // (Ouroboros cuts the layers into pp + 1 modules instead: finalize_ouroboros checks that multiple; the
  // counted split's rules are validate_layer_split's, below.)
  require(uneven || accounts || c.num_layers % pp == 0 || a.pipeline_schedule == "ouroboros", "--num-layers",
          c.num_layers, str_cat("must be divisible by --pipeline-model-parallel-size=", pp));
  // The layers of one pipeline stage the interleaving flags divide: with the embedding or the loss
  // counted, Megatron divides the counted layers' share.
  const int64_t stage_layers = a.layer_split.counted_layers() / pp;
  require(!uneven || a.num_layers_per_virtual_pipeline_stage == 0, "--num-layers-per-virtual-pipeline-stage",
          a.num_layers_per_virtual_pipeline_stage,
          "cannot be combined with an uneven split: give --num-virtual-stages-per-pipeline-rank");
  require(a.num_layers_per_virtual_pipeline_stage == 0 || a.num_virtual_stages_per_pipeline_rank == 0,
          "--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
          "cannot be combined with --num-virtual-stages-per-pipeline-rank");
  require(a.num_layers_per_virtual_pipeline_stage >= 0, "--num-layers-per-virtual-pipeline-stage",
          a.num_layers_per_virtual_pipeline_stage, "must be positive");
  require(a.num_virtual_stages_per_pipeline_rank >= 0, "--num-virtual-stages-per-pipeline-rank",
          a.num_virtual_stages_per_pipeline_rank, "must be positive");
  a.virtual_pipeline_size = 1;
  if (a.num_layers_per_virtual_pipeline_stage > 0) {
    require(stage_layers % a.num_layers_per_virtual_pipeline_stage == 0,
            "--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
            str_cat("must divide the ", stage_layers, " layers of each pipeline stage",
                    accounts ? " (the embedding or the loss counted as one)" : ""));
    a.virtual_pipeline_size = stage_layers / a.num_layers_per_virtual_pipeline_stage;
  } else if (a.num_virtual_stages_per_pipeline_rank > 0) {
    require(uneven || stage_layers % a.num_virtual_stages_per_pipeline_rank == 0,
            "--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank,
            str_cat("must divide the ", stage_layers, " layers of each pipeline stage",
                    accounts ? " (the embedding or the loss counted as one)" : ""));
    a.virtual_pipeline_size = a.num_virtual_stages_per_pipeline_rank;
  }
  require(a.virtual_pipeline_size == 1 || pp > 1, "--num-layers-per-virtual-pipeline-stage",
          a.num_layers_per_virtual_pipeline_stage,
          "the interleaved schedule needs --pipeline-model-parallel-size > 1");
  finalize_zero_bubble(a);
  if (uneven || accounts || a.zero_bubble == pipeline::ZeroBubble::V)  // every chunk a whole number of layers (named by flag)
    pipeline::validate_layer_split(a.layer_split, schedule_shape(a, 1));
  require(a.world_size % (tp * a.pipeline_model_parallel_size) == 0, "--tensor-model-parallel-size", tp,
          str_cat("x --pipeline-model-parallel-size=", a.pipeline_model_parallel_size,
                  " must divide the number of ranks (", a.world_size, ")"));
  require_positive("--context-parallel-size", a.context_parallel_size);
  require(a.world_size % (tp * a.context_parallel_size * a.pipeline_model_parallel_size) == 0,
          "--context-parallel-size", a.context_parallel_size,
          str_cat("x --tensor-model-parallel-size=", tp, " x --pipeline-model-parallel-size=",
                  a.pipeline_model_parallel_size, " must divide the number of ranks (", a.world_size, ")"));
  // What tensor parallelism splits: heads, key/value groups and the MLP's columns; with sequence
  // parallelism also the sequence.
  require(c.num_attention_heads % tp == 0, "--num-attention-heads", c.num_attention_heads,
          str_cat("must be divisible by --tensor-model-parallel-size=", tp));
  if (a.group_query_attention)
    require(c.num_query_groups % tp == 0, "--num-query-groups", c.num_query_groups,
            str_cat("must be divisible by --tensor-model-parallel-size=", tp));
  require(c.ffn_hidden_size % tp == 0, "--ffn-hidden-size", c.ffn_hidden_size,
          str_cat("must be divisible by --tensor-model-parallel-size=", tp));
  require(!a.sequence_parallel || c.seq_length % tp == 0, "--seq-length", c.seq_length,
          str_cat("must be divisible by --tensor-model-parallel-size=", tp, " with --sequence-parallel"));
  require_positive("--ddp-bucket-size", a.ddp_bucket_size);
  finalize_moe_layout(a);

  // Recomputation.
  if (a.recompute_activations) {
    require(a.recompute_granularity.empty() || a.recompute_granularity == "selective", "--recompute-activations",
            "true", str_cat("contradicts --recompute-granularity=", a.recompute_granularity));
    a.recompute_granularity = "selective";
  }
  require(a.recompute_granularity.empty() || a.recompute_granularity == "full" ||
              a.recompute_granularity == "selective",
          "--recompute-granularity", a.recompute_granularity, "must be full or selective");
  if (a.recompute_granularity == "full") {
    require(a.recompute_method == "uniform" || a.recompute_method == "block", "--recompute-method",
            a.recompute_method.empty() ? "(none)" : a.recompute_method,
            "must be uniform or block with --recompute-granularity full");
    if (a.recompute_num_layers == 0) a.recompute_num_layers = 1;
    int64_t chunk_layers = c.num_layers;  // the fewest layers of any model chunk that has some
    const pipeline::ScheduleShape shape = schedule_shape(a, 1);
    for (int stage = 0; stage < pp; ++stage)
      for (int k = 0; k < shape.chunks; ++k)
        if (const int n = pipeline::chunk_layers(a.layer_split, shape, {stage, k}).count; n > 0)
          chunk_layers = std::min<int64_t>(chunk_layers, n);
    require(a.recompute_num_layers >= 1 && a.recompute_num_layers <= chunk_layers, "--recompute-num-layers",
            a.recompute_num_layers, str_cat("must be in [1, ", chunk_layers, "] (the layers of one model chunk)"));
    a.recompute = {a.recompute_method == "uniform" ? model::RecomputeMethod::Uniform : model::RecomputeMethod::Block,
                   a.recompute_num_layers};
  } else {
    require(a.recompute_method.empty(), "--recompute-method", a.recompute_method,
            "needs --recompute-granularity full");
    require(a.recompute_num_layers == 0, "--recompute-num-layers", a.recompute_num_layers,
            "needs --recompute-granularity full");
  }

  // As Megatron: the parameter all-gather overlaps only what the distributed optimizer does.
  require(!a.overlap_param_gather || a.use_distributed_optimizer, "--overlap-param-gather", "true",
          "needs --use-distributed-optimizer");
  require(!a.overlap_param_gather || a.overlap_grad_reduce, "--overlap-param-gather", "true",
          "needs --overlap-grad-reduce");
  require_positive("--distributed-timeout-minutes", a.distributed_timeout_minutes);
}

}  // namespace tessera::train
