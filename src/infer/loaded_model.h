// A trained model ready to use: the configuration and tokenizer recorded in a checkpoint, this rank's
// part of the model with the checkpoint's weights, and its runner. Shared by `tessera generate`,
// `serve` and `eval`.
#pragma once

#include <memory>
#include <string>

#include "comm/parallel_state.h"
#include "data/tokenizer.h"
#include "data/tokenizer_factory.h"
#include "infer/model_runner.h"
#include "parallel/expert_dispatch.h"

namespace tessera::infer {

struct LoadOptions {
  std::string load;                  // --load: checkpoint directory (its latest iteration)
  data::TokenizerOptions tokenizer;  // empty type: the checkpoint's tokenizer
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  // MoE checkpoints: experts split over ep ranks (each whole, or split over etp ranks; 0: the tensor-
  // parallel size). The ranks of an expert group decode the same tokens in step.
  int expert_model_parallel_size = 1, expert_tensor_parallel_size = 0;
  bool moe_grouped_gemm = false;  // each rank's local experts as one batched product (model/grouped_mlp.h)
  int64_t seq_length = 0;  // 0: the checkpoint's (--seq-length of evaluation)
  DType params_dtype = DType::F32;  // GEMM inputs (--bf16, --fp16); checkpoints do not record the training's
  // Decoding steps multiply fp32 weights from packed copies (model::ParameterSet::keep_packed_weights),
  // which doubles the memory of the weights; false: oneDNN's matmul on the weights as stored.
  bool packed_weights = true;
};

class LoadedModel {
 public:
  // Collective over `world` (every rank calls it with the same options).
  LoadedModel(const LoadOptions& options, comm::ProcessGroup& world);

  const model::ModelConfig& config() const { return config_; }
  const data::Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelRunner& runner() const { return *runner_; }
  const comm::ParallelState& parallel_state() const { return *state_; }
  int64_t iteration() const { return iteration_; }

 private:
  model::ModelConfig config_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<comm::ParallelState> state_;
  parallel::ExpertParallelContext experts_;
  parallel::TensorParallelContext tp_;
  model::ParameterSet params_;
  std::unique_ptr<model::LanguageModelChunk> model_;
  std::unique_ptr<ModelRunner> runner_;
  int64_t iteration_ = 0;
};

}  // namespace tessera::infer
