// The Ouroboros driver (train/ouroboros_driver.h): its modules, their forwards, and each module's
// delayed backward of the mini-batch the rule gives it, at that mini-batch's weights.
#include "train/ouroboros_driver.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/check.h"
#include "kernels/tensor_ops.h"
#include "model/model_factory.h"
#include "model/vocab_parallel_embedding.h"
#include "train/device_setup.h"
#include "train/step_context.h"

namespace tessera::train {

OuroborosDriver::OuroborosDriver(const model::ModelConfig& config, const OuroborosOptions& options)
    : config_(config), options_(options), shape_{options.modules, options.warmup_iters} {
  // The modules' parameters (initialised on the host, moved once) and everything below on the device.
  DefaultDeviceScope on_device(options.device);
  pipeline::validate_ouroboros(shape_);
  TESSERA_CHECK(config.family == "gpt", "--pipeline-schedule ouroboros trains GPT models only, not --model-family ",
                config.family, " (issue 38)");
  TESSERA_CHECK(!config.untie_embeddings_and_output_weights,
                "--pipeline-schedule ouroboros needs the input embedding tied to the output layer (the first and "
                "last modules share it): drop --untie-embeddings-and-output-weights");
  const int K = shape_.modules;
  TESSERA_CHECK(config.num_layers % K == 0, "--pipeline-schedule ouroboros: --num-layers ", config.num_layers,
                " must be a multiple of the ", K, " modules (K = pipeline size + 1)");
  if (options.ring && options.ring->size() > 1) {
    ring_.emplace(*options.ring, shape_);
    TESSERA_CHECK(K == ring_->size() + 1, "--ouroboros-modules ", K, " must be --pipeline-model-parallel-size + 1 = ",
                  ring_->size() + 1, " (the first and last module share rank 0)");
  }
  if (options.data && options.data->size() > 1) data_ = options.data;
  TESSERA_CHECK(options.data_shares >= 1 && (data_ == nullptr || options.data_shares == 1),
                "Ouroboros: ", options.data_shares, " emulated data-parallel shares need one replica, not ",
                data_ ? data_->size() : 1);
  TESSERA_CHECK(!tp().sequence_parallel, "--pipeline-schedule ouroboros cannot be combined with --sequence-parallel yet "
                "(issue 38)");
  const int rank = ring_ ? ring_->rank() : 0;
  const int64_t per = config.num_layers / K;
  for (int k = 0; k < K; ++k) {
    Module m;
    if (ring_ && pipeline::ouroboros_rank_of_module(shape_, k) != rank) {  // another rank's
      modules_.push_back(std::move(m));
      continue;
    }
    m.params = std::make_unique<model::ParameterSet>();
    m.chunk = model::build_model_chunk(config, *m.params, tp(), model::ModelChunk{k * per, per, k == 0, k == K - 1});
    m.params->allocate(options.seed);
    // V as the model seam gives it: module 0's word embedding, module K-1's copy of it (initial values are
    // a function of (seed, name): the copy starts equal to V).
    model::Parameter* v = m.chunk->tied_word_embedding();
    TESSERA_CHECK((k == 0 || k == K - 1) == (v != nullptr), "Ouroboros: module ", k,
                  " does not hold the word embedding where the rule expects it");
    if (v) m.tied.push_back(v);
    m.exp_avg = Tensor::zeros({m.params->numel()}, DType::F32, options.device);
    m.exp_avg_sq = Tensor::zeros({m.params->numel()}, DType::F32, options.device);
    modules_.push_back(std::move(m));
  }
  // Every chunk of the model declares its auxiliary losses (the mtp_k losses), whichever part it holds.
  for (const Module& m : modules_)
    if (m.chunk) {
      auxiliary_names_ = m.chunk->auxiliary_loss_names();
      break;
    }
  last_auxiliary_sums_.assign(auxiliary_names_.size(), 0.0);
  // The tied units: V; and P where module K-1 holds a copy of it (learned absolute positions that the
  // multi-token prediction modules look up there). Module K-1's copy has P's name, so its initial values
  // are module 0's; from then on the driver keeps the two equal, as it does V's.
  tied_.push_back({"embedding.word_embeddings.weight", "tied", {}, {}, {}, 0});
  if (holds(0) && K > 1) {
    const std::string P = model::position_embedding_spec(config).name;
    if (model::Parameter* copy = modules_[K - 1].params->find(P)) {
      model::Parameter* own = modules_[0].params->find(P);
      TESSERA_CHECK(own != nullptr && copy->spec.tied_copy, "Ouroboros: module ", K - 1, " holds ", P,
                    " but it is not a copy of module 0's");
      modules_[0].tied.push_back(own);
      modules_[K - 1].tied.push_back(copy);
      tied_.push_back({P, "tied_positions", {}, {}, {}, 0});
    }
  }
  if (holds(0))
    for (size_t u = 0; u < tied_.size(); ++u) {
      const Shape& shape = modules_[0].tied[u]->value.shape();
      tied_[u].name = modules_[0].tied[u]->spec.name;
      tied_[u].grad = Tensor::zeros(shape, DType::F32, options.device);
      tied_[u].exp_avg = Tensor::zeros(shape, DType::F32, options.device);
      tied_[u].exp_avg_sq = Tensor::zeros(shape, DType::F32, options.device);
    }
}

bool OuroborosDriver::is_tied(const Module& mod, const model::Parameter& p) const {
  return std::find(mod.tied.begin(), mod.tied.end(), &p) != mod.tied.end();
}

const Tensor& OuroborosDriver::tied_gradient(const std::string& name) const {
  for (const TiedUnit& u : tied_)
    if (u.name == name && u.grad.defined()) return u.grad;
  TESSERA_CHECK(false, "Ouroboros: ", name, " is not a parameter modules 0 and ", modules() - 1,
                " share on this rank");
  return tied_[0].grad;
}

std::vector<std::string> OuroborosDriver::tied_names() const {
  std::vector<std::string> names;
  if (holds(0))
    for (const TiedUnit& u : tied_) names.push_back(u.name);
  return names;
}

const parallel::TensorParallelContext& OuroborosDriver::tp() const {
  return options_.tp ? *options_.tp : parallel::TensorParallelContext::single_process();
}

model::ParameterSet& OuroborosDriver::parameters(int module) {
  TESSERA_CHECK(holds(module), "Ouroboros: module ", module, " is on another rank");
  return *modules_[module].params;
}

const model::LanguageModelChunk& OuroborosDriver::chunk(int module) const {
  TESSERA_CHECK(holds(module), "Ouroboros: module ", module, " is on another rank");
  return *modules_[module].chunk;
}

model::ForwardContext OuroborosDriver::context(int64_t batch, int micro) const {
  const BatchInfo& info = batch_info_.at(batch);
  // As the trainer's: dropout keyed by the iteration the mini-batch ran forward at.
  return micro_batch_context(options_.seed, batch, /*training=*/true, info.sample_offsets[micro], config_.seq_length,
                             info.micro_batch_size, info.per_sample_loss_weight);
}

// Module by module, each module's micro-batches in order (the loss is the last module's). On a ring each
// rank runs its modules, the input of each micro-batch coming from the rank before. t < 0: evaluation
// (no records kept; its messages complete here).
void OuroborosDriver::forward_modules(const std::vector<model::MicroBatch>& batches,
                                      const std::function<model::ForwardContext(int)>& context,
                                      const std::function<model::LossSums&(int)>& losses, int64_t t, int through) {
  const int K = through >= 0 ? through + 1 : modules();
  const int M = static_cast<int>(batches.size());
  const OuroborosRing::Kind kind = t < 0 ? OuroborosRing::Kind::Evaluation : OuroborosRing::Kind::Activation;
  if (ring_) ring_->set_activation_shape({batches[0].tokens.shape()[0] * config_.seq_length, config_.hidden_size});
  std::vector<Tensor> below(M);  // the outputs of the module below, when held here
  for (int k = 0; k < K; ++k) {
    if (!holds(k)) continue;
    for (int m = 0; m < M; ++m) {
      Tensor input;
      if (k > 0) input = holds(k - 1) ? std::move(below[m]) : ring_->receive(k - 1, kind, t, m);
      std::unique_ptr<model::ChunkRecord> rec = modules_[k].chunk->make_record();
      Tensor out = modules_[k].chunk->forward(batches[m], input, context(m), *rec, losses(m));
      if (t >= 0) modules_[k].records[{t, m}] = std::move(rec);
      if (k + 1 < K) {
        if (holds(k + 1)) below[m] = out;
        else ring_->send(out, k + 1, kind, t, m);
      }
    }
  }
  if (t < 0 && ring_) ring_->finish_sends();
}

void OuroborosDriver::forward_only(const std::vector<model::MicroBatch>& batches, double per_sample_loss_weight,
                                   model::LossSums& losses) {
  TESSERA_CHECK(!batches.empty(), "Ouroboros: an evaluation needs at least one micro-batch");
  DefaultDeviceScope on_device(options_.device);
  const std::vector<model::MicroBatch> on = on_device_batches(batches);
  for (int k = 0; k < modules(); ++k)
    if (holds(k)) modules_[k].params->weights_changed();
  const int64_t rows = on[0].tokens.shape()[0];
  forward_modules(on, [&](int m) {
    return micro_batch_context(options_.seed, iteration_, /*training=*/false, batches[m].sample_offset,
                               config_.seq_length, rows, per_sample_loss_weight);
  }, [&](int) -> model::LossSums& { return losses; }, -1);
}

double OuroborosDriver::step(const std::vector<model::MicroBatch>& host_batches, double tokens, float lr) {
  TESSERA_CHECK(!host_batches.empty(), "Ouroboros: an iteration needs at least one micro-batch");
  // Activations, weight versions and gradients on the device; the micro-batches moved there once.
  DefaultDeviceScope on_device(options_.device);
  const std::vector<model::MicroBatch> batches = on_device_batches(host_batches);
  const int64_t t = iteration_;
  const int K = modules();
  const int M = static_cast<int>(batches.size());
  const std::vector<pipeline::OuroborosStep> plan = pipeline::ouroboros_iteration(shape_, t);

  // Mini-batch t's loss tokens (over every replica) scale its gradients (the objective is its mean
  // loss), whenever they run. D shares: micro-batch m is share m % D's (one process emulating replicas).
  const int D = options_.data_shares;
  TESSERA_CHECK(M % D == 0, "Ouroboros: ", M, " micro-batches do not split into ", D, " data-parallel shares");
  BatchInfo info;
  for (const model::MicroBatch& mb : batches) info.sample_offsets.push_back(mb.sample_offset);
  info.micro_batch_size = batches[0].tokens.shape()[0];
  info.grad_scale = gradient_scale(tokens);
  info.per_sample_loss_weight =
      per_sample_loss_weight(tokens, static_cast<double>(info.micro_batch_size * M * replicas()));
  batch_info_[t] = info;

  // The weights of iteration t, for the modules whose backward of mini-batch t comes later.
  for (int k = 0; k < K; ++k)
    if (holds(k) && pipeline::ouroboros_keeps_record(shape_, k, t))
      modules_[k].versions[t] = modules_[k].params->values().clone();

  // Forward of mini-batch t through modules 0 .. K-1 with the current weights w^t.
  std::vector<model::LossSums> losses(D);
  forward_modules(batches, [&](int m) { return context(t, m); },
                  [&](int m) -> model::LossSums& { return losses[m % D]; }, t);

  // Each module's backward runs with the weights of the iteration its mini-batch ran forward at: swap
  // them in, keeping the current ones to restore.
  std::vector<Tensor> current(K);
  for (int k = 0; k < K; ++k) {
    if (!holds(k)) continue;
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
  // received now; the previous one after it, received at the end of that step). V's accumulator takes
  // the output layer's term, then the input embedding's, in plain training's order; P's the multi-token
  // prediction modules' lookups, then the input embedding's.
  // D shares run one after another (micro-batches d, d + D, ...), each summing its gradients alone.
  if (holds(0))
    for (TiedUnit& u : tied_) u.grad.zero_();
  std::vector<std::vector<Tensor>> module_shares(K);
  std::vector<std::vector<Tensor>> tied_shares(tied_.size());
  for (int d = 0; d < D; ++d) {
    for (int m = d; m < M; m += D) {
      for (int k = K - 1; k >= 0; --k) {
        if (!holds(k)) continue;
        Module& mod = modules_[k];
        const int64_t s = plan[k].backward_batch;
        if (s < 0) continue;
        auto rec = mod.records.find({s, m});
        TESSERA_CHECK(rec != mod.records.end(), "Ouroboros: module ", k, " holds no activations of mini-batch ", s);
        Tensor dout;
        if (k + 1 < K) {
          if (!holds(k + 1) && plan[k].output_grad_from_iteration == t) {
            dout = ring_->receive(k + 1, OuroborosRing::Kind::ErrorGradient, s, m);
          } else {
            auto g = mod.output_grads.find({s, m});
            TESSERA_CHECK(g != mod.output_grads.end(), "Ouroboros: module ", k, " has no error gradient for mini-batch ", s);
            dout = g->second;
            mod.output_grads.erase(g);
          }
        }
        for (size_t u = 0; u < mod.tied.size(); ++u) kernels::copy(mod.tied[u]->grad, tied_[u].grad);
        Tensor din = mod.chunk->backward(*rec->second, dout, context(s, m), batch_info_.at(s).grad_scale);
        for (size_t u = 0; u < mod.tied.size(); ++u) kernels::copy(tied_[u].grad, mod.tied[u]->grad);
        mod.records.erase(rec);
        if (k > 0) {
          if (holds(k - 1)) modules_[k - 1].output_grads[{s, m}] = din;
          else ring_->send(din, k - 1, OuroborosRing::Kind::ErrorGradient, s, m);
        }
      }
    }
    if (D == 1) break;
    for (int k = 0; k < K; ++k)
      if (holds(k) && plan[k].backward_batch >= 0) {
        module_shares[k].push_back(modules_[k].params->grads().clone());
        modules_[k].params->zero_grad();
      }
    if (holds(0))
      for (size_t u = 0; u < tied_.size(); ++u) {
        tied_shares[u].push_back(tied_[u].grad.clone());
        tied_[u].grad.zero_();
      }
  }
  reduce_gradients(plan, module_shares, tied_shares);
  for (int k = 0; k < K; ++k)
    if (current[k].defined()) {
      kernels::copy(modules_[k].params->values(), current[k]);
      modules_[k].params->weights_changed();
    }
  // After the warm-up, the error gradients a module above on another rank produced this iteration are
  // for this module's backward at the next one: they arrive now, so that no message outlives the step.
  if (ring_) {
    const int64_t n = shape_.warmup_iters;
    for (int k = 0; k + 1 < K; ++k) {
      const int64_t s = plan[k + 1].backward_batch;
      if (!holds(k) || holds(k + 1) || t < n || s < 0) continue;
      const int micro = static_cast<int>(batch_info_.at(s).sample_offsets.size());
      for (int m = 0; m < micro; ++m)
        modules_[k].output_grads[{s, m}] = ring_->receive(k + 1, OuroborosRing::Kind::ErrorGradient, s, m);
    }
    ring_->finish_sends();
  }
  // The lowest module held here is the last to need a mini-batch: done with it, its keys and scale go.
  for (int k = 0; k < K; ++k)
    if (holds(k)) {
      if (plan[k].backward_batch >= 0) batch_info_.erase(plan[k].backward_batch);
      break;
    }

  update(lr);
  ++iteration_;
  // The losses are on rank 0 (the last module's): every rank takes their bits. Per share the LM loss,
  // then each auxiliary loss in the order of the names; the replicas' shares are added in replica order.
  const size_t slots = 1 + auxiliary_names_.size();
  std::vector<double> share_losses;
  for (const model::LossSums& l : losses) {
    share_losses.push_back(l.lm);
    for (const std::string& name : auxiliary_names_) {
      double value = 0;
      for (const auto& [n, v] : l.auxiliary)
        if (n == name) value += v;
      share_losses.push_back(value);
    }
  }
  for (const model::LossSums& l : losses)
    for (const auto& [n, v] : l.auxiliary)
      TESSERA_CHECK(std::find(auxiliary_names_.begin(), auxiliary_names_.end(), n) != auxiliary_names_.end(),
                    "Ouroboros: the last module added a loss '", n, "' the model does not declare");
  if (ring_) {
    const int64_t n = static_cast<int64_t>(share_losses.size());
    Tensor bits = Tensor::empty({n}, DType::I64, Device::cpu());  // host bits, over MPI (a GPU's group routes them)
    std::memcpy(bits.host_i64(), share_losses.data(), n * sizeof(double));
    ring_->group().broadcast(bits, 0);
    std::memcpy(share_losses.data(), bits.host_i64(), n * sizeof(double));
  }
  std::vector<double> sums(slots, 0.0);
  const std::vector<double> replica_losses = sum_over_replicas(share_losses);
  for (size_t i = 0; i < replica_losses.size(); ++i) sums[i % slots] += replica_losses[i];
  const double loss_sum = sums[0];
  last_loss_sum_ = loss_sum;
  last_auxiliary_sums_.assign(sums.begin() + 1, sums.end());
  return mean_loss(loss_sum, tokens);
}

std::vector<model::MicroBatch> OuroborosDriver::on_device_batches(const std::vector<model::MicroBatch>& batches) const {
  // On a GPU the ids are checked on the host, as the trainer's schedule does (no copy back to check them).
  const int64_t vocab = options_.device.type == DeviceType::CPU ? 0 : config_.vocab_size;
  std::vector<model::MicroBatch> out;
  out.reserve(batches.size());
  for (const model::MicroBatch& b : batches) out.push_back(micro_batch_on(b, options_.device, vocab));
  return out;
}

void OuroborosDriver::copy_weights_to(model::ParameterSet& params) const {
  for (const Module& mod : modules_)
    if (mod.params)
      for (const model::Parameter& p : mod.params->params())
        if (!p.spec.tied_copy) kernels::copy(params.get(p.spec.name).value, p.value);
  params.weights_changed();
}

}  // namespace tessera::train
