#include "train/ouroboros_driver.h"

#include <cmath>
#include <cstring>
#include <functional>

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
  if (options.ring && options.ring->size() > 1) {
    ring_ = options.ring;
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
    // Initial values are a function of (seed, name): module K-1's copy of V starts equal to module 0's V.
    for (model::Parameter& p : m.params->params())
      if (p.spec.name == "embedding.word_embeddings.weight") m.tied = &p;
    TESSERA_CHECK((k == 0 || k == K - 1) == (m.tied != nullptr), "Ouroboros: module ", k,
                  " does not hold the word embedding where the rule expects it");
    m.exp_avg = Tensor::zeros({m.params->numel()});
    m.exp_avg_sq = Tensor::zeros({m.params->numel()});
    modules_.push_back(std::move(m));
  }
  if (holds(0)) {
    const Shape& v = modules_[0].tied->value.shape();
    tied_grad_ = Tensor::zeros(v);
    tied_exp_avg_ = Tensor::zeros(v);
    tied_exp_avg_sq_ = Tensor::zeros(v);
  }
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
  // As the trainer's: dropout keyed by the iteration the mini-batch ran forward at (1-based).
  model::ForwardContext ctx{options_.seed, batch + 1, info.sample_offsets[micro], true, config_.seq_length,
                            info.micro_batch_size};
  ctx.per_sample_loss_weight = info.per_sample_loss_weight;
  return ctx;
}

// Unique among the messages that can be in flight between two ranks at once: forward or backward, the
// mini-batch modulo 4 (a rank is never more than one iteration ahead of its neighbour), the micro-batch;
// kind 2 (evaluation's forward, between steps) has tags of its own.
int OuroborosDriver::tag(int kind, int64_t batch, int micro) const {
  TESSERA_CHECK(micro < 2048, "Ouroboros on ", ring_->size(), " ranks: at most 2048 micro-batches per iteration, got ",
                micro + 1);
  if (kind == 2) return 8 * 2048 + micro;
  return static_cast<int>(((batch & 3) * 2 + kind) * 2048 + micro);
}

void OuroborosDriver::send(const Tensor& t, int to_module, int kind, int64_t batch, int micro) {
  const int dst = pipeline::ouroboros_rank_of_module(shape_, to_module);
  sends_.emplace_back(t, ring_->send_async(t, dst, tag(kind, batch, micro)));
}

Tensor OuroborosDriver::receive(int from_module, int kind, int64_t batch, int micro) {
  Tensor t = Tensor::empty(activation_);
  ring_->recv(t, pipeline::ouroboros_rank_of_module(shape_, from_module), tag(kind, batch, micro));
  return t;
}

// Module by module, each module's micro-batches in order (the loss is the last module's). On a ring each
// rank runs its modules, the input of each micro-batch coming from the rank before. t < 0: evaluation
// (no records kept; its messages complete here).
void OuroborosDriver::forward_modules(const std::vector<model::MicroBatch>& batches,
                                      const std::function<model::ForwardContext(int)>& context,
                                      const std::function<model::LossSums&(int)>& losses, int64_t t, int through) {
  const int K = through >= 0 ? through + 1 : modules();
  const int M = static_cast<int>(batches.size());
  const int kind = t < 0 ? 2 : 0;
  activation_ = {batches[0].tokens.shape()[0] * config_.seq_length, config_.hidden_size};
  std::vector<Tensor> below(M);  // the outputs of the module below, when held here
  for (int k = 0; k < K; ++k) {
    if (!holds(k)) continue;
    for (int m = 0; m < M; ++m) {
      Tensor input;
      if (k > 0) input = holds(k - 1) ? std::move(below[m]) : receive(k - 1, kind, t, m);
      std::unique_ptr<model::ChunkRecord> rec = modules_[k].chunk->make_record();
      Tensor out = modules_[k].chunk->forward(batches[m], input, context(m), *rec, losses(m));
      if (t >= 0) modules_[k].records[{t, m}] = std::move(rec);
      if (k + 1 < K) {
        if (holds(k + 1)) below[m] = out;
        else send(out, k + 1, kind, t, m);
      }
    }
  }
  if (t < 0 && ring_) {
    for (auto& [buffer, work] : sends_) work->wait();
    sends_.clear();
  }
}

void OuroborosDriver::forward_only(const std::vector<model::MicroBatch>& batches,
                                   const std::function<model::ForwardContext(int)>& context, model::LossSums& losses) {
  TESSERA_CHECK(!batches.empty(), "Ouroboros: an evaluation needs at least one micro-batch");
  for (int k = 0; k < modules(); ++k)
    if (holds(k)) modules_[k].params->weights_changed();
  forward_modules(batches, context, [&](int) -> model::LossSums& { return losses; }, -1);
}

double OuroborosDriver::step(const std::vector<model::MicroBatch>& batches, float lr) {
  TESSERA_CHECK(!batches.empty(), "Ouroboros: an iteration needs at least one micro-batch");
  const int64_t t = iteration_;
  const int K = modules();
  const int M = static_cast<int>(batches.size());
  const std::vector<pipeline::OuroborosStep> plan = pipeline::ouroboros_iteration(shape_, t);

  // Mini-batch t's loss tokens (over every replica) scale its gradients (the objective is its mean
  // loss), whenever they run. D shares: micro-batch m is share m % D's (one process emulating replicas).
  const int D = options_.data_shares;
  TESSERA_CHECK(M % D == 0, "Ouroboros: ", M, " micro-batches do not split into ", D, " data-parallel shares");
  BatchInfo info;
  std::vector<double> share_tokens(D, 0.0);
  for (int m = 0; m < M; ++m) {
    const model::MicroBatch& mb = batches[m];
    for (int64_t i = 0; i < mb.loss_mask.numel(); ++i) share_tokens[m % D] += mb.loss_mask.host_f32()[i];
    info.sample_offsets.push_back(mb.sample_offset);
  }
  double tokens = 0;
  for (double v : sum_over_replicas(share_tokens)) tokens += v;
  info.micro_batch_size = batches[0].tokens.shape()[0];
  info.grad_scale = tokens > 0 ? static_cast<float>(1.0 / tokens) : 0.0f;
  info.per_sample_loss_weight =
      tokens / static_cast<double>(info.micro_batch_size * static_cast<int64_t>(batches.size()) * replicas());
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
  // the output layer's term, then the input embedding's, in plain training's order.
  // D shares run one after another (micro-batches d, d + D, ...), each summing its gradients alone.
  if (holds(0)) tied_grad_.zero_();
  std::vector<std::vector<Tensor>> module_shares(K);
  std::vector<Tensor> tied_shares;
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
            dout = receive(k + 1, 1, s, m);
          } else {
            auto g = mod.output_grads.find({s, m});
            TESSERA_CHECK(g != mod.output_grads.end(), "Ouroboros: module ", k, " has no error gradient for mini-batch ", s);
            dout = g->second;
            mod.output_grads.erase(g);
          }
        }
        if (mod.tied) kernels::copy(mod.tied->grad, tied_grad_);
        Tensor din = mod.chunk->backward(*rec->second, dout, context(s, m), batch_info_.at(s).grad_scale);
        if (mod.tied) kernels::copy(tied_grad_, mod.tied->grad);
        mod.records.erase(rec);
        if (k > 0) {
          if (holds(k - 1)) modules_[k - 1].output_grads[{s, m}] = din;
          else send(din, k - 1, 1, s, m);
        }
      }
    }
    if (D == 1) break;
    for (int k = 0; k < K; ++k)
      if (holds(k) && plan[k].backward_batch >= 0) {
        module_shares[k].push_back(modules_[k].params->grads().clone());
        modules_[k].params->zero_grad();
      }
    if (holds(0)) {
      tied_shares.push_back(tied_grad_.clone());
      tied_grad_.zero_();
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
      for (int m = 0; m < micro; ++m) modules_[k].output_grads[{s, m}] = receive(k + 1, 1, s, m);
    }
    for (auto& [buffer, work] : sends_) work->wait();
    sends_.clear();
  }
  // The lowest module held here is the last to need a mini-batch: done with it, its keys and scale go.
  for (int k = 0; k < K; ++k)
    if (holds(k)) {
      if (plan[k].backward_batch >= 0) batch_info_.erase(plan[k].backward_batch);
      break;
    }

  update(lr);
  ++iteration_;
  // The loss is on rank 0 (the last module's): every rank takes its bits.
  std::vector<double> share_losses;
  for (const model::LossSums& l : losses) share_losses.push_back(l.lm);
  if (ring_) {
    Tensor bits = Tensor::empty({1}, DType::I64);
    std::memcpy(bits.host_i64(), share_losses.data(), sizeof(double));
    ring_->broadcast(bits, 0);
    std::memcpy(share_losses.data(), bits.host_i64(), sizeof(double));
  }
  double loss_sum = 0;
  for (double v : sum_over_replicas(share_losses)) loss_sum += v;
  last_loss_sum_ = loss_sum;
  last_tokens_ = tokens;
  return tokens > 0 ? loss_sum / tokens : 0.0;
}

int OuroborosDriver::replicas() const { return data_ ? data_->size() : 1; }

// Every replica's values (each replica passes one per share: one), in replica order, as int64 bits so
// that no rank rounds them; in one process the shares themselves.
std::vector<double> OuroborosDriver::sum_over_replicas(const std::vector<double>& mine) {
  if (!data_) return mine;
  const int64_t n = static_cast<int64_t>(mine.size());
  Tensor bits = Tensor::empty({n}, DType::I64);
  std::memcpy(bits.host_i64(), mine.data(), n * sizeof(double));
  Tensor all = Tensor::empty({data_->size() * n}, DType::I64);
  data_->all_gather(bits, all);
  std::vector<double> out(static_cast<size_t>(all.numel()));
  std::memcpy(out.data(), all.host_i64(), out.size() * sizeof(double));
  return out;
}

namespace {

// out = ((parts[0] + parts[1]) + parts[2]) + ...: the one order in which replicas' (or shares')
// gradients are added, wherever that happens, so that the emulation and the replicas agree bit for bit.
void add_in_order(float* out, const std::vector<const float*>& parts, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float sum = parts[0][i];
    for (size_t d = 1; d < parts.size(); ++d) sum += parts[d][i];
    out[i] = sum;
  }
}

// Every rank's `t` gathered over `group`, added in rank order into `t`.
void sum_in_rank_order(comm::ProcessGroup& group, const Tensor& t) {
  const int64_t n = t.numel();
  Tensor all = Tensor::empty({group.size() * n});
  group.all_gather(t, all);
  std::vector<const float*> parts;
  for (int r = 0; r < group.size(); ++r) parts.push_back(all.host_f32() + r * n);
  add_in_order(t.host_f32(), parts, n);
}

}  // namespace

// Before any update: with D emulated shares, each module's gradient (and V's) is the sum of the shares'
// in share order; with replicas, the sum of the replicas' in replica order (gathered, not all-reduced:
// an all-reduce's order is MPI's choice). Every replica then holds the same gradients.
void OuroborosDriver::reduce_gradients(const std::vector<pipeline::OuroborosStep>& plan,
                                       std::vector<std::vector<Tensor>>& module_shares,
                                       std::vector<Tensor>& tied_shares) {
  auto add_shares = [](const Tensor& out, const std::vector<Tensor>& shares) {
    std::vector<const float*> parts;
    for (const Tensor& s : shares) parts.push_back(s.host_f32());
    add_in_order(out.host_f32(), parts, out.numel());
  };
  for (int k = 0; k < modules(); ++k) {
    if (!holds(k) || plan[k].backward_batch < 0) continue;
    Module& mod = modules_[k];
    if (!module_shares[k].empty()) add_shares(mod.params->grads(), module_shares[k]);
    if (data_)
      for (model::Parameter& p : mod.params->params())
        if (&p != mod.tied) sum_in_rank_order(*data_, p.grad);
  }
  if (!holds(0)) return;
  if (!tied_shares.empty()) add_shares(tied_grad_, tied_shares);
  if (data_) sum_in_rank_order(*data_, tied_grad_);
}

double OuroborosDriver::global_squares(std::vector<double> module_squares, double tied_squares) {
  const int K = modules();
  if (tp().size() > 1) {
    // Each module's sum and V's over the tensor group, as int64 bits, added in tensor-rank order.
    comm::ProcessGroup& group = *tp().group;
    module_squares.push_back(tied_squares);
    const int64_t n = static_cast<int64_t>(module_squares.size());
    Tensor mine = Tensor::empty({n}, DType::I64);
    std::memcpy(mine.host_i64(), module_squares.data(), n * sizeof(double));
    Tensor all = Tensor::empty({group.size() * n}, DType::I64);
    group.all_gather(mine, all);
    std::vector<double> gathered(static_cast<size_t>(all.numel()));
    std::memcpy(gathered.data(), all.host_i64(), gathered.size() * sizeof(double));
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int r = 0; r < group.size(); ++r) sum += gathered[r * n + i];
      module_squares[i] = sum;
    }
    tied_squares = module_squares.back();
    module_squares.pop_back();
  }
  std::vector<double> parts = module_squares;
  if (ring_) {
    // Three slots per rank: its first module's part, rank 0's module K-1 part, V's part (rank 0). The
    // bits travel as int64, so no rank rounds them.
    enum { kFirst, kLast, kTied, kSlots };
    Tensor mine = Tensor::zeros({kSlots}, DType::I64);
    double slots[kSlots] = {0, 0, 0};
    const int rank = ring_->rank();
    slots[kFirst] = module_squares[rank];
    if (rank == 0) slots[kLast] = module_squares[K - 1], slots[kTied] = tied_squares;
    std::memcpy(mine.host_i64(), slots, sizeof slots);
    Tensor all = Tensor::empty({ring_->size() * kSlots}, DType::I64);
    ring_->all_gather(mine, all);
    std::vector<double> gathered(static_cast<size_t>(all.numel()));
    std::memcpy(gathered.data(), all.host_i64(), gathered.size() * sizeof(double));
    for (int k = 0; k < K; ++k)
      parts[k] = k == K - 1 ? gathered[kLast] : gathered[pipeline::ouroboros_rank_of_module(shape_, k) * kSlots + kFirst];
    tied_squares = gathered[kTied];
  }
  double squares = 0;
  for (int k = 0; k < K; ++k) squares += parts[k];
  return squares + tied_squares;
}

// AdamW over the units that have a gradient this iteration: each module's own parameters but V, and V
// (every iteration: module K-1's term is always fresh). The clipping norm is over all of them, V once:
// each module's sum of squares (its parameters in order), added in module order, then V's.
void OuroborosDriver::update(float lr) {
  const int K = modules();
  std::vector<optim::MomentShard> units(K);
  std::vector<double> module_squares(K, 0.0);
  for (int k = 0; k < K; ++k) {
    if (!holds(k)) continue;
    Module& mod = modules_[k];
    if (mod.last_backward_batch < 0) continue;
    units[k] = {{}, mod.exp_avg, mod.exp_avg_sq, false};
    for (const model::Parameter& p : mod.params->params()) {
      if (&p == mod.tied) continue;
      units[k].pieces.push_back({&p, 0, p.value.numel(), p.offset, false});
      // Under tensor parallelism a parameter whole on every tensor rank counts once (tensor rank 0's).
      if (p.spec.sharding.sharded() || tp().size() == 1 || tp().rank() == 0)
        module_squares[k] += kernels::sum_of_squares(p.grad);
    }
  }
  // (V is split over the tensor ranks by vocabulary: every rank's part counts.)
  const double norm = std::sqrt(global_squares(std::move(module_squares),
                                               holds(0) ? kernels::sum_of_squares(tied_grad_) : 0.0));
  last_grad_norm_ = norm;
  for (int k = 0; k < K; ++k)
    if (holds(k) && modules_[k].last_backward_batch >= 0)
      optim::adamw_update(units[k], options_.adam, lr, 1.0f, norm, modules_[k].steps);
  if (!holds(0)) return;
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
    if (mod.params)
      for (const model::Parameter& p : mod.params->params())
        if (!p.spec.tied_copy) kernels::copy(params.get(p.spec.name).value, p.value);
  params.weights_changed();
}

}  // namespace tessera::train
