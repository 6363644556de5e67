// Ouroboros' state in checkpoints (issue 38, docs/ouroboros.md "Checkpoints"): what the delayed rule
// holds between iterations, saved so that a resumed run continues the same sequence bit for bit.
//
// Saved as tensors: each held module's current weights, its earlier weight versions (iteration ->
// flat weights), the error gradients waiting for its next backward, its AdamW moments, and V's moments.
// Saved as metadata (JSON): the iteration, the layout that saved it, each module's step count and last
// backward's mini-batch, the keys of the pending activation records and what each pending mini-batch's
// backward needs (dropout keys, loss scale; doubles as their bits). The activation records themselves
// are rebuilt: a record of mini-batch s is pending only for modules 0 .. j(s) (the lower the module,
// the later its backward), each of which still holds its weights of iteration s, so running s's
// forward again through those modules at those weights gives the same records.
#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "kernels/tensor_ops.h"
#include "train/ouroboros_driver.h"

namespace tessera::train {

using nlohmann::json;

namespace {

int64_t bits_of(double v) {
  int64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

double from_bits(int64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

std::string module_key(int k, const std::string& what) { return str_cat("module", k, ".", what); }

// The file is read on the host; a tensor on a GPU is read into a host copy and moved (the save stages
// through the host too: ckpt's CheckpointSave), so a state saved on a GPU loads on the CPU and the reverse.
void read_state_into(const ckpt::SafetensorsFile& file, const std::string& name, const Tensor& dst) {
  if (dst.device() == Device::cpu()) return file.read_into(name, dst);
  const Tensor host = Tensor::empty(dst.shape(), dst.dtype(), Device::cpu());
  file.read_into(name, host);
  kernels::transfer(dst, host);
}

Tensor read_state(const ckpt::SafetensorsFile& file, const std::string& name, Device device) {
  return kernels::to_device(file.read(name), device);
}

}  // namespace

ckpt::ExtraFile OuroborosDriver::checkpoint_file(const std::string& name) const {
  ckpt::ExtraFile file{name, {}, {}};
  json meta = {{"format", "tessera-ouroboros"},
               {"version", 1},
               {"iteration", iteration_},
               {"modules", shape_.modules},
               {"warmup_iters", shape_.warmup_iters},
               {"pipeline_ranks", ring_ ? ring_->size() : 1},
               {"pipeline_rank", ring_ ? ring_->rank() : 0},
               {"tensor_ranks", tp().size()},
               {"tensor_rank", tp().rank()},
               {"replicas", replicas()},
               {"replica", data_ ? data_->rank() : 0},
               {"data_shares", options_.data_shares},
               {"tied_steps", tied_[0].steps}};
  json held = json::array();
  for (int k = 0; k < modules(); ++k) {
    if (!holds(k)) continue;
    const Module& mod = modules_[k];
    json entry = {{"module", k}, {"steps", mod.steps}, {"last_backward_batch", mod.last_backward_batch}};
    file.tensors.emplace_back(module_key(k, "weights"), mod.params->values());
    file.tensors.emplace_back(module_key(k, "exp_avg"), mod.exp_avg);
    file.tensors.emplace_back(module_key(k, "exp_avg_sq"), mod.exp_avg_sq);
    json versions = json::array(), records = json::array(), grads = json::array();
    for (const auto& [s, w] : mod.versions) {
      versions.push_back(s);
      file.tensors.emplace_back(module_key(k, str_cat("version.", s)), w);
    }
    for (const auto& [key, rec] : mod.records) records.push_back({key.first, key.second});
    for (const auto& [key, g] : mod.output_grads) {
      grads.push_back({key.first, key.second});
      file.tensors.emplace_back(module_key(k, str_cat("output_grad.", key.first, ".", key.second)), g);
    }
    entry["versions"] = versions;
    entry["records"] = records;
    entry["output_grads"] = grads;
    held.push_back(entry);
  }
  meta["held"] = held;
  // Each tied unit's moments (V's as "tied.*"; P's, with multi-token prediction over learned
  // positions, as "tied_positions.*" with its step count).
  if (holds(0))
    for (const TiedUnit& u : tied_) {
      file.tensors.emplace_back(u.checkpoint + ".exp_avg", u.exp_avg);
      file.tensors.emplace_back(u.checkpoint + ".exp_avg_sq", u.exp_avg_sq);
      if (&u != &tied_[0]) meta[u.checkpoint + "_steps"] = u.steps;
    }
  json batches = json::array();
  for (const auto& [s, info] : batch_info_)
    batches.push_back({{"batch", s},
                       {"sample_offsets", info.sample_offsets},
                       {"micro_batch_size", info.micro_batch_size},
                       {"grad_scale_bits", bits_of(info.grad_scale)},
                       {"per_sample_loss_weight_bits", bits_of(info.per_sample_loss_weight)}});
  meta["batches"] = batches;
  file.metadata["ouroboros"] = meta.dump();
  return file;
}

void OuroborosDriver::load_checkpoint_file(const ckpt::SafetensorsFile& file,
                                           const std::function<std::vector<model::MicroBatch>(int64_t)>& batches,
                                           uint64_t seed) {
  TESSERA_CHECK(file.metadata().count("ouroboros"), "--load: ", file.path(), " holds no Ouroboros state");
  // The records run again (below) on the device, with the micro-batches moved there.
  DefaultDeviceScope on_device(options_.device);
  const Device device = options_.device;
  const json meta = json::parse(file.metadata().at("ouroboros"));
  TESSERA_CHECK(meta.at("format") == "tessera-ouroboros" && meta.at("version") == 1, "--load: ", file.path(),
                " is not a version 1 Ouroboros state file");
  // The state is this rank's part of one layout: the same layout must load it.
  auto same = [&](const char* what, int64_t here, const char* flag) {
    const int64_t saved = meta.at(what).get<int64_t>();
    TESSERA_CHECK(saved == here, "--load: the Ouroboros state in ", file.path(), " was saved with ", what, " ",
                  saved, ", this run has ", here, " (", flag, "); it resumes at the layout that saved it");
  };
  same("modules", shape_.modules, "--ouroboros-modules");
  same("warmup_iters", shape_.warmup_iters, "--ouroboros-warmup-iters");
  same("pipeline_ranks", ring_ ? ring_->size() : 1, "--pipeline-model-parallel-size");
  same("pipeline_rank", ring_ ? ring_->rank() : 0, "--pipeline-model-parallel-size");
  same("tensor_ranks", tp().size(), "--tensor-model-parallel-size");
  same("tensor_rank", tp().rank(), "--tensor-model-parallel-size");
  same("replicas", replicas(), "the data-parallel size");
  same("replica", data_ ? data_->rank() : 0, "the data-parallel size");
  same("data_shares", options_.data_shares, "the emulated data-parallel shares");

  options_.seed = seed;
  iteration_ = meta.at("iteration").get<int64_t>();
  tied_[0].steps = meta.at("tied_steps").get<int64_t>();
  batch_info_.clear();
  for (const json& b : meta.at("batches")) {
    BatchInfo info;
    info.sample_offsets = b.at("sample_offsets").get<std::vector<int64_t>>();
    info.micro_batch_size = b.at("micro_batch_size").get<int64_t>();
    info.grad_scale = static_cast<float>(from_bits(b.at("grad_scale_bits").get<int64_t>()));
    info.per_sample_loss_weight = from_bits(b.at("per_sample_loss_weight_bits").get<int64_t>());
    batch_info_[b.at("batch").get<int64_t>()] = info;
  }
  std::map<int, std::vector<Key>> saved_records;
  std::set<int> loaded;
  for (const json& entry : meta.at("held")) {
    const int k = entry.at("module").get<int>();
    TESSERA_CHECK(k >= 0 && k < modules() && holds(k), "--load: ", file.path(), " holds module ", k,
                  ", which is not on this rank");
    Module& mod = modules_[k];
    loaded.insert(k);
    mod.steps = entry.at("steps").get<int64_t>();
    mod.last_backward_batch = entry.at("last_backward_batch").get<int64_t>();
    read_state_into(file, module_key(k, "weights"), mod.params->values());
    read_state_into(file, module_key(k, "exp_avg"), mod.exp_avg);
    read_state_into(file, module_key(k, "exp_avg_sq"), mod.exp_avg_sq);
    mod.params->weights_changed();
    mod.versions.clear();
    for (const json& s : entry.at("versions")) mod.versions[s.get<int64_t>()] = read_state(file, module_key(k, str_cat("version.", s.get<int64_t>())), device);
    mod.output_grads.clear();
    for (const json& key : entry.at("output_grads")) {
      const Key kk{key.at(0).get<int64_t>(), key.at(1).get<int>()};
      mod.output_grads[kk] = read_state(file, module_key(k, str_cat("output_grad.", kk.first, ".", kk.second)), device);
    }
    mod.records.clear();
    for (const json& key : entry.at("records")) saved_records[k].push_back({key.at(0).get<int64_t>(), key.at(1).get<int>()});
  }
  for (int k = 0; k < modules(); ++k)
    TESSERA_CHECK(!holds(k) || loaded.count(k), "--load: ", file.path(), " holds no state of module ", k);
  if (holds(0))
    for (TiedUnit& u : tied_) {
      if (&u != &tied_[0]) {
        TESSERA_CHECK(meta.contains(u.checkpoint + "_steps"), "--load: ", file.path(), " holds no state of ",
                      u.name, ", which this run's modules 0 and ", modules() - 1, " share (saved without "
                      "--mtp-num-layers over learned absolute positions?)");
        u.steps = meta.at(u.checkpoint + "_steps").get<int64_t>();
      }
      read_state_into(file, u.checkpoint + ".exp_avg", u.exp_avg);
      read_state_into(file, u.checkpoint + ".exp_avg_sq", u.exp_avg_sq);
    }

  // The pending records: module k's backward of mini-batch s is still to come when it falls at an
  // iteration >= t. For each such s (oldest first), its forward again through modules 0 .. j(s), each at
  // its weights of iteration s; the losses are not used.
  const int64_t t = iteration_;
  const int K = modules();
  for (int64_t s = std::max<int64_t>(0, t - K); s < t; ++s) {
    int through = -1;
    for (int k = 0; k < K; ++k)
      for (int64_t u = t; u < t + K; ++u)
        if (pipeline::ouroboros_backward_batch(shape_, k, u) == s) through = std::max(through, k);
    bool here = false;  // whether this rank holds one of modules 0 .. through (on a ring it may not)
    for (int k = 0; k <= through; ++k) here = here || holds(k);
    if (!here) continue;
    const std::vector<model::MicroBatch> micro = on_device_batches(batches(s));
    const BatchInfo& info = batch_info_.at(s);
    TESSERA_CHECK(micro.size() == info.sample_offsets.size(), "--load: mini-batch ", s, " had ",
                  info.sample_offsets.size(), " micro-batches on this rank, this run gives ", micro.size(),
                  " (--global-batch-size, --micro-batch-size)");
    for (size_t m = 0; m < micro.size(); ++m)
      TESSERA_CHECK(micro[m].sample_offset == info.sample_offsets[m], "--load: micro-batch ", m, " of mini-batch ", s,
                    " starts at sample ", micro[m].sample_offset, ", the saving run's at ", info.sample_offsets[m]);
    std::vector<Tensor> current(K);
    for (int k = 0; k <= through; ++k) {
      if (!holds(k)) continue;
      auto v = modules_[k].versions.find(s);
      TESSERA_CHECK(v != modules_[k].versions.end(), "--load: module ", k, " holds no weights of iteration ", s);
      current[k] = modules_[k].params->values().clone();
      kernels::copy(modules_[k].params->values(), v->second);
      modules_[k].params->weights_changed();
    }
    model::LossSums unused;
    forward_modules(micro, [&](int m) { return context(s, m); }, [&](int) -> model::LossSums& { return unused; }, s,
                    through);
    for (int k = 0; k <= through; ++k)
      if (current[k].defined()) {
        kernels::copy(modules_[k].params->values(), current[k]);
        modules_[k].params->weights_changed();
      }
  }
  if (ring_) ring_->finish_sends();
  // The records run again are exactly those the saving run held.
  for (int k = 0; k < K; ++k) {
    if (!holds(k)) continue;
    std::vector<Key> rebuilt;
    for (const auto& [key, rec] : modules_[k].records) rebuilt.push_back(key);
    TESSERA_CHECK(rebuilt == saved_records[k], "--load: module ", k, " rebuilt ", rebuilt.size(),
                  " activation records, the saving run held ", saved_records[k].size());
  }
}

}  // namespace tessera::train
