// Ouroboros (issue 38, docs/ouroboros.md) emulated in one process: a GPT cut into K modules of
// consecutive layers, each a LanguageModelChunk in its own ParameterSet (as it will be on its own rank),
// trained with the delayed-gradient rule that pipeline/ouroboros_schedule writes as data. Deterministic:
// the MPI run on K - 1 ranks must equal it bit for bit.
//
// On K - 1 ranks (the MPI run) each rank holds only its modules (pipeline::ouroboros_rank_of_module:
// module k on rank k, module K-1 on rank 0 beside module 0) and runs the same per-module code; the
// activations go forward around the ring rank 0 -> 1 -> ... -> K-2 -> 0 and the error gradients back,
// point to point, tagged by (mini-batch, micro-batch) (train/ouroboros_ring.h). All ranks agree on the
// gradient norm (each module's sum of squares gathered and added in module order) and on the losses (from
// rank 0): the LM loss and the auxiliary ones the last module adds (--mtp-num-layers' mtp_k losses).
//
// The driver (ouroboros_driver.cc: the modules, their forwards and delayed backwards) is in three files
// beside the ring: ouroboros_update.cc (the replicas' gradients added in order, the norm, AdamW per
// unit) and ouroboros_checkpoint.cc (its state in checkpoints).
//
// Per module it keeps what the rule needs: the weight versions its later backwards run with, the
// activation records of the mini-batches whose backward is still to come, and the error gradients the
// module above sent for them. The tied word embedding V (module 0's, and module K-1's copy) has one
// gradient accumulator: the output layer's fresh term plus the input embedding's stale one. With
// --mtp-num-layers the multi-token prediction modules sit on module K-1 after its output layer, so their
// gradient is fresh too, and their lookups of V (in module K-1's copy) land in the fresh term. With
// learned absolute positions they also look up the position embedding P, so module K-1 holds a copy of
// P too (as a last pipeline stage does, model/gpt_model.cc's stage_copy) and P is tied as V is: one
// accumulator, the modules' fresh lookups plus module 0's stale embedding term, one AdamW unit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/process_group.h"
#include "model/language_model.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"
#include "parallel/tensor_parallel.h"
#include "pipeline/ouroboros_schedule.h"
#include "train/ouroboros_ring.h"

namespace tessera::train {

struct OuroborosOptions {
  int modules = 2;           // K; num_layers must be a multiple of it
  int64_t warmup_iters = 0;  // N synchronous iterations first
  optim::AdamWConfig adam;
  uint64_t seed = 1234;      // parameter initialisation and dropout keys, as --seed
  // The K - 1 ranks of the MPI run, in ring order (the pipeline group); null or a group of one: every
  // module in this process (the emulation). Not owned.
  comm::ProcessGroup* ring = nullptr;
  // Tensor parallelism inside every module (its group: the ranks of one pipeline rank); null: none. The
  // activation between modules is whole on every tensor rank (no sequence parallelism). Not owned.
  const parallel::TensorParallelContext* tp = nullptr;
  // Data parallelism: the replicas of this rank's modules (the data-parallel group), each running the
  // ring on its share of the global batch; null or a group of one: none. Not owned.
  comm::ProcessGroup* data = nullptr;
  // The emulation of `data` in one process (no group): the gradients, losses and tokens of D shares of
  // the mini-batch (micro-batch j in share j % D, as the trainer deals micro-batches to replicas) are
  // summed share by share and the shares added in share order, the operations D replicas do, so that
  // their run equals this one bit for bit. 1: plain accumulation.
  int data_shares = 1;
  // Where the modules, their weight versions, gradients, AdamW moments and activations live (--device):
  // every entry point makes its tensors there and moves the micro-batches there. The host keeps only
  // doubles (losses, norms), sent as host tensors.
  Device device = Device::cpu();
};

class OuroborosDriver {
 public:
  // Builds this rank's modules (all K in one process) of a GPT with tied embeddings; throws an Error
  // naming the rule otherwise. With a ring of P ranks, K must be P + 1.
  OuroborosDriver(const model::ModelConfig& config, const OuroborosOptions& options);

  // Runs iteration t = iteration(): the forward of mini-batch t (`batches`, its micro-batches) with the
  // current weights, each module's backward of the mini-batch the schedule gives it with that
  // mini-batch's weights, and the AdamW update of every unit that has a gradient. `tokens`: the loss
  // tokens of the whole mini-batch, over every replica (train/step_context.h), which scale its
  // gradients whenever they run. Returns mini-batch t's mean loss per loss token (at w^t). On a ring,
  // every rank calls it with the same mini-batch and runs its modules' part; every rank returns the same
  // loss and norm. Every message of the step is complete when it returns (the error gradients for the
  // next iteration have arrived).
  double step(const std::vector<model::MicroBatch>& batches, double tokens, float lr);

  // Forward only through the modules at the current weights (evaluation, dropout keyed by iteration()):
  // adds the last module's losses into `losses` where it is held (rank 0 on a ring). Changes no state; on
  // a ring every rank calls it with the same micro-batches, and its messages are complete when it returns.
  void forward_only(const std::vector<model::MicroBatch>& batches, double per_sample_loss_weight,
                    model::LossSums& losses);

  int64_t iteration() const { return iteration_; }
  int modules() const { return static_cast<int>(modules_.size()); }
  const pipeline::OuroborosShape& shape() const { return shape_; }
  // Whether this process holds module k (every module in one process).
  bool holds(int module) const { return modules_[module].params != nullptr; }
  // Module k's weights and chunk; only for a module this process holds.
  model::ParameterSet& parameters(int module);
  const model::LanguageModelChunk& chunk(int module) const;
  // The mini-batch whose gradient module k applied at the last step (-1: none).
  int64_t last_backward_batch(int module) const { return modules_[module].last_backward_batch; }
  // The tied embedding's gradient applied at the last step: output layer's term + input embedding's
  // (where module 0 is held).
  const Tensor& tied_gradient() const { return tied_[0].grad; }
  // The gradient applied at the last step of a parameter module 0 and module K-1 share, by name: V, or
  // with multi-token prediction the learned position embedding P (the modules' lookups + module 0's).
  // Where module 0 is held; an Error names a parameter that is not tied.
  const Tensor& tied_gradient(const std::string& name) const;
  // The names of the tied parameters (V first), where module 0 is held.
  std::vector<std::string> tied_names() const;
  // The last step's mini-batch's summed masked token losses (the trainer logs it as it logs its own: as
  // an fp32 value, divided by the loss tokens).
  double last_loss_sum() const { return last_loss_sum_; }
  // The names of the losses the model adds besides the LM loss (the mtp_k losses), in its order, and
  // the last step's mini-batch's sums of each, reduced as last_loss_sum (the same on every rank).
  const std::vector<std::string>& auxiliary_loss_names() const { return auxiliary_names_; }
  const std::vector<double>& last_auxiliary_sums() const { return last_auxiliary_sums_; }
  // The global gradient norm of the last step (before clipping): every unit that stepped, V once.
  double last_grad_norm() const { return last_grad_norm_; }
  // Copies the current weights of the modules held here into `params` by name (a whole-model ParameterSet, as the trainer's on
  // one process), so that evaluation, sampling and the log read the trained model.
  void copy_weights_to(model::ParameterSet& params) const;

  // Checkpoints (train/ouroboros_checkpoint.cc). What this rank's modules hold between iterations: the
  // current weights, the earlier weight versions, the error gradients waiting, the AdamW moments and
  // step counts, the iteration, and what each pending mini-batch's backward needs (dropout keys, loss
  // scale), as an extra checkpoint file named `name`. The activation records are not saved: loading
  // runs the pending mini-batches' forwards again at their saved weight versions (deterministic, so
  // the records are the same bits), and the resumed run continues the same sequence.
  ckpt::ExtraFile checkpoint_file(const std::string& name) const;
  // Restores what checkpoint_file saved. batches(s): this rank's micro-batches of mini-batch s, for the
  // forwards run again; seed: the run's (dropout keys) from now on. Collective over the ring; an Error
  // names what differs from the saving run.
  void load_checkpoint_file(const ckpt::SafetensorsFile& file,
                            const std::function<std::vector<model::MicroBatch>(int64_t)>& batches, uint64_t seed);

  // Weight versions, activation records and error gradients held now (tests: what the rule keeps).
  int64_t held_weight_versions(int module) const { return static_cast<int64_t>(modules_[module].versions.size()); }
  int64_t held_records(int module) const { return static_cast<int64_t>(modules_[module].records.size()); }
  int64_t held_output_grads(int module) const { return static_cast<int64_t>(modules_[module].output_grads.size()); }

 private:
  using Key = std::pair<int64_t, int>;  // (mini-batch, micro-batch)
  struct Module {
    std::unique_ptr<model::ParameterSet> params;
    std::unique_ptr<model::LanguageModelChunk> chunk;
    // Per tied unit (tied_ below): module 0's parameter or module K-1's copy of it; empty elsewhere.
    std::vector<model::Parameter*> tied;
    Tensor exp_avg, exp_avg_sq;           // AdamW moments over the flat buffer (the tied parts unused)
    int64_t steps = 0;                    // this module's AdamW steps (bias correction)
    std::map<int64_t, Tensor> versions;   // iteration -> the flat weights of that iteration
    std::map<Key, std::unique_ptr<model::ChunkRecord>> records;
    std::map<Key, Tensor> output_grads;   // from the module above, for a later backward
    int64_t last_backward_batch = -1;
  };
  // What a later backward needs of a mini-batch besides the records: its dropout keys and loss scale.
  struct BatchInfo {
    std::vector<int64_t> sample_offsets;  // per micro-batch
    int64_t micro_batch_size = 0;
    float grad_scale = 0;                 // 1 / loss tokens of the mini-batch
    double per_sample_loss_weight = 1;
  };
  model::ForwardContext context(int64_t batch, int micro) const;
  // The micro-batches on options_.device (the same tensors on the CPU).
  std::vector<model::MicroBatch> on_device_batches(const std::vector<model::MicroBatch>& batches) const;
  // losses(m): where micro-batch m's last-module losses go. through >= 0: modules 0 .. through only.
  void forward_modules(const std::vector<model::MicroBatch>& batches,
                       const std::function<model::ForwardContext(int)>& context,
                       const std::function<model::LossSums&(int)>& losses, int64_t t, int through = -1);
  // The delayed-gradient update (ouroboros_update.cc).
  void update(float lr);
  // The sum of each module's part (in module order), then V's: the same on every rank. Each part is
  // first summed over the tensor group (in its rank order).
  double global_squares(std::vector<double> module_squares, double tied_squares);
  // The replicas' (or the emulated shares') parts added in replica order, the same on every replica.
  int replicas() const;
  std::vector<double> sum_over_replicas(const std::vector<double>& mine);
  // tied_shares[u]: tied unit u's accumulator per share.
  void reduce_gradients(const std::vector<pipeline::OuroborosStep>& plan,
                        std::vector<std::vector<Tensor>>& module_shares,
                        std::vector<std::vector<Tensor>>& tied_shares);
  bool is_tied(const Module& mod, const model::Parameter& p) const;
  const parallel::TensorParallelContext& tp() const;

  model::ModelConfig config_;
  OuroborosOptions options_;
  pipeline::OuroborosShape shape_;
  std::vector<Module> modules_;
  std::map<int64_t, BatchInfo> batch_info_;
  std::optional<OuroborosRing> ring_;   // none in one process
  comm::ProcessGroup* data_ = nullptr;  // the replicas; null without data parallelism
  // A parameter modules 0 and K-1 both hold, updated once per iteration from one gradient accumulator
  // (where module 0 is held): V, then P where module K-1 holds a copy of it.
  struct TiedUnit {
    std::string name;        // the parameter's, the same in both modules
    std::string checkpoint;  // its state's keys in the checkpoint file ("tied" for V)
    Tensor grad, exp_avg, exp_avg_sq;
    int64_t steps = 0;
  };
  std::vector<TiedUnit> tied_;
  double last_grad_norm_ = 0, last_loss_sum_ = 0;
  std::vector<std::string> auxiliary_names_;
  std::vector<double> last_auxiliary_sums_;
  int64_t iteration_ = 0;
};

}  // namespace tessera::train
