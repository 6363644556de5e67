#include "plan/run_layout.h"

#include <algorithm>

namespace tessera::plan {

Layout layout_of_run(const train::TrainArguments& a) {
  Layout l;
  l.tp = static_cast<int>(a.tensor_model_parallel_size);
  l.cp = static_cast<int>(a.context_parallel_size);
  l.pp = static_cast<int>(a.pipeline_model_parallel_size);
  l.dp = static_cast<int>(a.data_parallel_size());
  l.virtual_stages = static_cast<int>(a.virtual_pipeline_size);  // 2 under ZB-V
  l.zero_bubble = a.zero_bubble;
  l.embedding_in_split = a.account_for_embedding_in_pipeline_split;
  l.loss_in_split = a.account_for_loss_in_pipeline_split;
  if (a.model.moe.enabled()) {  // a dense model keeps etp unset, so that its description has no experts
    l.ep = static_cast<int>(a.expert_model_parallel_size);
    l.etp = static_cast<int>(a.expert_tensor_parallel_size);
    l.allgather_dispatcher = a.moe_token_dispatcher_type == "allgather";
  }
  l.sequence_parallel = a.sequence_parallel;
  l.micro_batch_size = a.micro_batch_size;
  l.global_batch_size = a.global_batch_size;
  // The planner prices full recomputation as uniform groups (block recomputation as the same).
  if (a.recompute_granularity == "full") l.recompute = Recompute::Full;
  if (a.recompute_granularity == "selective" || a.recompute_activations) l.recompute = Recompute::Selective;
  l.recompute_num_layers = static_cast<int>(std::max<int64_t>(1, a.recompute_num_layers));
  l.distributed_optimizer = a.use_distributed_optimizer;
  l.overlap_grad_reduce = a.overlap_grad_reduce;
  l.ddp_bucket_size = a.ddp_bucket_size;
  l.overlap_param_gather = a.overlap_param_gather;
  l.precision = a.bf16 ? Precision::Bf16 : a.fp16 ? Precision::Fp16 : Precision::Fp32;
  l.flash_attention = true;
  return l;
}

}  // namespace tessera::plan
