#include "train/ouroboros_driver.h"

#include <cmath>

#include "core/check.h"
#include "kernels/adamw.h"
#include "kernels/tensor_ops.h"
#include "model/model_factory.h"

namespace tessera::train {

OuroborosDriver::OuroborosDriver(const model::ModelConfig& config, const OuroborosOptions& options)
    : config_(config), options_(options), shape_{options.modules, options.warmup_iters} {
  pipeline::validate_ouroboros(shape_);
  TESSERA_CHECK(config.family == "gpt", "--pipeline-schedule ouroboros trains GPT models only, not --model-family ",
                config.family, " (issue 38)");
  TESSERA_CHECK(!config.untie_embeddings_and_output_weights,
                "--pipeline-schedule ouroboros needs the input embedding tied to the output layer (the first and "
                "last modules share it): drop --untie-embeddings-and-output-weights");
  const int K = shape_.modules;
  TESSERA_CHECK(config.num_layers % K == 0, "--pipeline-schedule ouroboros: --num-layers ", config.num_layers,
                " must be a multiple of the ", K, " modules (K = pipeline size + 1)");
  const int64_t per = config.num_layers / K;
  for (int k = 0; k < K; ++k) {
    Module m;
    m.params = std::make_unique<model::ParameterSet>();
    m.chunk = model::build_model_chunk(config, *m.params, parallel::TensorParallelContext::single_process(),
                                       model::ModelChunk{k * per, per, k == 0, k == K - 1});
    m.params->allocate(options.seed);
    // Initial values are a function of (seed, name): module K-1's copy of V starts equal to module 0's V.
    for (model::Parameter& p : m.params->params())
      if (p.spec.name == "embedding.word_embeddings.weight") m.tied = &p;
    TESSERA_CHECK((k == 0 || k == K - 1) == (m.tied != nullptr), "Ouroboros: module ", k,
                  " does not hold the word embedding where the rule expects it");
    m.exp_avg = Tensor::zeros({m.params->numel()});
    m.exp_avg_sq = Tensor::zeros({m.params->numel()});
    modules_.push_back(std::move(m));
  }
  const Shape& v = modules_[0].tied->value.shape();
  tied_grad_ = Tensor::zeros(v);
  tied_exp_avg_ = Tensor::zeros(v);
  tied_exp_avg_sq_ = Tensor::zeros(v);
}

model::ForwardContext OuroborosDriver::context(int64_t batch, int micro) const {
  const BatchInfo& info = batch_info_.at(batch);
  // As the trainer's: dropout keyed by the iteration the mini-batch ran forward at (1-based).
  model::ForwardContext ctx{options_.seed, batch + 1, info.sample_offsets[micro], true, config_.seq_length,
                            info.micro_batch_size};
  ctx.per_sample_loss_weight = info.per_sample_loss_weight;
  return ctx;
}

double OuroborosDriver::step(const std::vector<model::MicroBatch>& batches, float lr) {
  TESSERA_CHECK(!batches.empty(), "Ouroboros: an iteration needs at least one micro-batch");
  const int64_t t = iteration_;
  const int K = modules();
  const std::vector<pipeline::OuroborosStep> plan = pipeline::ouroboros_iteration(shape_, t);

  // Mini-batch t's loss tokens scale its gradients (the objective is its mean loss), whenever they run.
  BatchInfo info;
  double tokens = 0;
  for (const model::MicroBatch& mb : batches) {
    for (int64_t i = 0; i < mb.loss_mask.numel(); ++i) tokens += mb.loss_mask.f32()[i];
    info.sample_offsets.push_back(mb.sample_offset);
  }
  info.micro_batch_size = batches[0].tokens.shape()[0];
  info.grad_scale = tokens > 0 ? static_cast<float>(1.0 / tokens) : 0.0f;
  info.per_sample_loss_weight = tokens / static_cast<double>(info.micro_batch_size * batches.size());
  batch_info_[t] = info;

  // The weights of iteration t, for the modules whose backward of mini-batch t comes later.
  for (int k = 0; k < K; ++k)
    if (pipeline::ouroboros_keeps_record(shape_, k, t)) modules_[k].versions[t] = modules_[k].params->values().clone();

  // Forward of mini-batch t through modules 0 .. K-1 with the current weights w^t.
  model::LossSums losses;
  for (int m = 0; m < static_cast<int>(batches.size()); ++m) {
    Tensor activation;
    for (int k = 0; k < K; ++k) {
      std::unique_ptr<model::ChunkRecord> rec = modules_[k].chunk->make_record();
      activation = modules_[k].chunk->forward(batches[m], activation, context(t, m), *rec, losses);
      modules_[k].records[{t, m}] = std::move(rec);
    }
  }

  // Each module's backward runs with the weights of the iteration its mini-batch ran forward at: swap
  // them in, keeping the current ones to restore.
  std::vector<Tensor> current(K);
  for (int k = 0; k < K; ++k) {
    Module& mod = modules_[k];
    mod.params->zero_grad();
    mod.last_backward_batch = plan[k].backward_batch;
    const int64_t s = plan[k].backward_batch;
    if (s < 0 || s == t) continue;
    current[k] = mod.params->values().clone();
    kernels::copy(mod.params->values(), mod.versions.at(s));
    mod.versions.erase(s);
    mod.params->weights_changed();
  }

  // Backward, micro-batch by micro-batch, from the last module to the first. Module k backpropagates its
  // mini-batch s with the error gradient module k + 1 produced for s (this iteration in the warm-up,
  // the previous one after it). V's accumulator takes the output layer's term, then the input
  // embedding's, in plain training's order.
  tied_grad_.zero_();
  for (int m = 0; m < static_cast<int>(batches.size()); ++m) {
    for (int k = K - 1; k >= 0; --k) {
      Module& mod = modules_[k];
      const int64_t s = plan[k].backward_batch;
      if (s < 0) continue;
      auto rec = mod.records.find({s, m});
      TESSERA_CHECK(rec != mod.records.end(), "Ouroboros: module ", k, " holds no activations of mini-batch ", s);
      Tensor dout;
      if (k + 1 < K) {
        auto g = mod.output_grads.find({s, m});
        TESSERA_CHECK(g != mod.output_grads.end(), "Ouroboros: module ", k, " has no error gradient for mini-batch ", s);
        dout = g->second;
        mod.output_grads.erase(g);
      }
      if (mod.tied) kernels::copy(mod.tied->grad, tied_grad_);
      Tensor din = mod.chunk->backward(*rec->second, dout, context(s, m), batch_info_.at(s).grad_scale);
      if (mod.tied) kernels::copy(tied_grad_, mod.tied->grad);
      mod.records.erase(rec);
      if (k > 0) modules_[k - 1].output_grads[{s, m}] = din;
    }
  }
  for (int k = 0; k < K; ++k)
    if (current[k].defined()) {
      kernels::copy(modules_[k].params->values(), current[k]);
      modules_[k].params->weights_changed();
    }
  // Module 0 is the last to need a mini-batch: done with it, its keys and scale go.
  if (plan[0].backward_batch >= 0) batch_info_.erase(plan[0].backward_batch);

  update(lr);
  ++iteration_;
  last_loss_sum_ = losses.lm;
  last_tokens_ = tokens;
  return tokens > 0 ? losses.lm / tokens : 0.0;
}

// AdamW over the units that have a gradient this iteration: each module's own parameters but V, and V
// (every iteration: module K-1's term is always fresh). The clipping norm is over all of them, V once.
void OuroborosDriver::update(float lr) {
  const int K = modules();
  std::vector<optim::MomentShard> units(K);
  double squares = 0;
  for (int k = 0; k < K; ++k) {
    Module& mod = modules_[k];
    if (mod.last_backward_batch < 0) continue;
    units[k] = {{}, mod.exp_avg, mod.exp_avg_sq, false};
    for (const model::Parameter& p : mod.params->params()) {
      if (&p == mod.tied) continue;
      units[k].pieces.push_back({&p, 0, p.value.numel(), p.offset, false});
      squares += kernels::sum_of_squares(p.grad);
    }
  }
  squares += kernels::sum_of_squares(tied_grad_);
  const double norm = std::sqrt(squares);
  last_grad_norm_ = norm;
  for (int k = 0; k < K; ++k)
    if (modules_[k].last_backward_batch >= 0)
      optim::adamw_update(units[k], options_.adam, lr, 1.0f, norm, modules_[k].steps);
  // V: its unit reads the accumulator through module 0's V (whose grad buffer is free now), then the
  // copy in module K-1 takes the same values, as the embedding group keeps the two stages' copies equal.
  model::Parameter& v = *modules_[0].tied;
  kernels::copy(v.grad, tied_grad_);
  optim::MomentShard tied{{{&v, 0, v.value.numel(), 0, false}}, tied_exp_avg_, tied_exp_avg_sq_, false};
  optim::adamw_update(tied, options_.adam, lr, 1.0f, norm, tied_steps_);
  if (K > 1) kernels::copy(modules_[K - 1].tied->value, v.value);
}

void OuroborosDriver::copy_weights_to(model::ParameterSet& params) const {
  for (const Module& mod : modules_)
    for (const model::Parameter& p : mod.params->params())
      if (!p.spec.tied_copy) kernels::copy(params.get(p.spec.name).value, p.value);
  params.weights_changed();
}

}  // namespace tessera::train
