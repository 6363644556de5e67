#include "ckpt/megatron_dist_saver.h"

#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include "ckpt/dcp_writer.h"
#include "ckpt/hf_layout.h"
#include "ckpt/megatron_rng.h"
#include "ckpt/torch_save.h"
#include "core/file_io.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;  // as megatron_legacy.cc (the layer builds as unity batches)

namespace {

constexpr std::string_view kLocalExperts = "mlp.experts.local_experts.";
constexpr std::string_view kMtpLayer = ".transformer_layer.";  // in mtp.layers.K.transformer_layer.*

// Where one Tessera tensor goes: its sharded key, the leading axes Megatron adds (the stacked layers, the
// experts) with this tensor's index on them, and its stage and expert rank.
struct DistPlace {
  std::string key;
  Shape lead, lead_offsets;
  int64_t stage = 0, expert_rank = 0;
};

// The part of a layer's key after its layer number, an expert's with the expert left out ("mlp.experts.
// experts.linear_fc1.weight", Megatron's sharded name), and the global expert (-1: none).
std::string sharded_rest(const std::string& rest, int64_t* expert) {
  *expert = -1;
  if (rest.compare(0, kLocalExperts.size(), kLocalExperts) != 0) return rest;
  const size_t dot = rest.find('.', kLocalExperts.size());
  *expert = std::stoll(rest.substr(kLocalExperts.size(), dot - kLocalExperts.size()));
  return "mlp.experts.experts." + rest.substr(dot + 1);
}

Shape concat(const Shape& a, const Shape& b) {
  Shape out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

std::vector<std::string> export_megatron_dist(const std::string& load_dir, const std::string& save_dir,
                                              const MegatronSaveOptions& options) {
  MegatronSaveOptions o = options;
  o.torch_dist = true;
  TESSERA_CHECK(!o.legacy_names, "convert --saver megatron --ckpt-format torch_dist: --megatron-names legacy names the "
                "legacy format's keys; torch_dist has Megatron-Core's sharded keys only");
  const MegatronExport ex = prepare_megatron_export(load_dir, o);
  const model::ModelConfig& c = ex.config;
  TESSERA_CHECK(c.family == "gpt" || c.family == "bert", "convert --saver megatron --ckpt-format torch_dist: ", load_dir,
                " holds a ", c.family, " model; only GPT and BERT models are written as Megatron checkpoints");
  // A BERT's stack is Megatron-Core's BertModel "encoder" (megatron_key names every stack "decoder").
  const std::string stack = c.family == "bert" ? "encoder.layers." : "decoder.layers.";
  const int64_t L = c.num_layers, per_stage = L / ex.pp, local_experts = ex.experts > 0 ? ex.experts / ex.ep : 1;

  // Megatron-Core's rule (megatron_stacks_layers: by the moe_layer_freq the args hold), so that Megatron's
  // loader finds the keys its model asks for. Stacking needs every layer to have the same keys (the
  // experts counted once), which the rule implies for the models Tessera writes; checked all the same.
  std::map<int64_t, std::set<std::string>> layer_keys;
  for (const auto& [name, t] : ex.tensors) {
    const MegatronKey k = megatron_key(name);
    int64_t expert = -1;
    if (k.layer >= 0) layer_keys[k.layer].insert(sharded_rest(k.rest, &expert));
  }
  const bool stacked = megatron_stacks_layers(c);
  for (const auto& [layer, keys] : layer_keys)
    TESSERA_CHECK(!stacked || keys == layer_keys.begin()->second, "convert --saver megatron --ckpt-format torch_dist: ",
                  "layer ", layer, " of ", load_dir, " has other keys than layer ", layer_keys.begin()->first,
                  ", so its layers cannot be stacked as Megatron-Core stacks them (moe_layer_freq 1 or a dense model)");

  const std::string iteration = iteration_dir_name(ex.state.iteration);
  const fs::path dir = fs::path(save_dir) / iteration;
  DcpWriter dcp(dir.string());
  for (const auto& [name, whole] : ex.tensors) {
    const MegatronKey k = megatron_key(name);
    DistPlace at;
    if (k.layer >= 0) {
      int64_t expert = -1;
      const std::string rest = sharded_rest(k.rest, &expert);
      at.key = stacked ? str_cat(stack, rest) : str_cat(stack, k.layer, ".", rest);
      if (stacked) at.lead = {L}, at.lead_offsets = {k.layer};
      if (expert >= 0) {
        at.lead.push_back(ex.experts);
        at.lead_offsets.push_back(expert);
        at.expert_rank = expert / local_experts;
      }
      at.stage = k.layer / per_stage;
    } else if (const size_t in_layer = name.find(kMtpLayer);
               name.rfind("mtp.layers.", 0) == 0 && in_layer != std::string::npos) {
      // A multi-token prediction module's layer: Megatron-Core's MTP block hands its layers no stacking offset,
      // so their keys keep the module's number (mtp.layers.K.transformer_layer.*) and only the experts gain an
      // axis, as in a per-layer decoder key. The modules sit on the last stage.
      const size_t after = in_layer + kMtpLayer.size();
      int64_t expert = -1;
      at.key = name.substr(0, after) + sharded_rest(name.substr(after), &expert);
      if (expert >= 0) {
        at.lead = {ex.experts};
        at.lead_offsets = {expert};
        at.expert_rank = expert / local_experts;
      }
      at.stage = ex.pp - 1;
    } else {
      at.key = name;
      at.stage = name.rfind("embedding.", 0) == 0 ? 0 : ex.pp - 1;
    }
    const MegatronSplit split = megatron_split(name, c.swiglu);
    const Shape global = concat(at.lead, whole.shape());
    const Shape ones(at.lead.size(), 1);
    for (int64_t t = 0; t < ex.tp; ++t) {
      if (split == MegatronSplit::Replicated && t > 0) break;  // saved once, by tensor rank 0
      const int rank = static_cast<int>(t + ex.tp * (at.expert_rank + ex.ep * at.stage));
      const Tensor shard = megatron_tensor_shard(whole, split, t, ex.tp);
      Shape offsets(whole.shape().size(), 0);
      const auto add = [&](const Tensor& chunk, const Shape& within) {
        dcp.add_tensor(at.key, global, concat(at.lead_offsets, within), chunk.clone().view(concat(ones, chunk.shape())),
                       ex.stored, rank);
      };
      if (split == MegatronSplit::GatedRows) {  // [all gates; all ups]: this rank's gate rows, then its up rows
        const int64_t n = shard.shape()[0] / 2, half = whole.shape()[0] / 2;
        offsets[0] = t * n;
        add(hf_layout::rows(shard, 0, n), offsets);
        offsets[0] = half + t * n;
        add(hf_layout::rows(shard, n, n), offsets);
        continue;
      }
      if (split == MegatronSplit::Rows) offsets[0] = t * shard.shape()[0];
      if (split == MegatronSplit::Columns) offsets[1] = t * shard.shape()[1];
      add(shard, offsets);
    }
  }
  // Each rank's generators, a ShardedObject over (pipeline, tensor[, expert]) as Megatron saves rng_state.
  for (int64_t p = 0; p < ex.pp; ++p)
    for (int64_t t = 0; t < ex.tp; ++t)
      for (int64_t e = 0; e < ex.ep; ++e) {
        TorchSaveWriter writer;
        const PickleOut rng = megatron_rng_state(ex.state.seed, p, t, e, t, writer);
        const std::string key = ex.ep > 1 ? str_cat("rng_state/shard_", p, ".", t, ".", e, "_", ex.pp, ".", ex.tp, ".", ex.ep)
                                          : str_cat("rng_state/shard_", p, ".", t, "_", ex.pp, ".", ex.tp);
        dcp.add_object(key, writer.bytes(rng), static_cast<int>(t + ex.tp * (e + ex.ep * p)));
      }
  dcp.finish();

  TorchSaveWriter common;
  PickleOut root = PickleOut::dict();
  root.set("args", ex.args)
      .set("checkpoint_version", PickleOut::float_of(3.0))
      .set("iteration", PickleOut::int_of(ex.state.iteration));
  common.write((dir / "common.pt").string(), root);
  write_file_atomically((dir / "metadata.json").string(),
                        "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1, "
                        "\"common_backend\": \"torch\", \"common_backend_version\": 1}");
  write_file_atomically((fs::path(save_dir) / "latest_checkpointed_iteration.txt").string(),
                        std::to_string(ex.state.iteration));
  std::vector<std::string> notes = {str_cat(
      "torch_dist: the weights (",
      stacked ? "layers stacked" : "one key per layer, as Megatron-Core writes them for a --moe-layer-freq list or interval above 1",
      "), the model's arguments in common.pt and each rank's rng_state as Megatron seeds a run of seed ", ex.state.seed,
      " are written; the optimizer state is not (load it in Megatron with --no-load-optim, or --finetune)")};
  if (ex.padded_vocab != c.padded_vocab_size)
    notes.push_back(str_cat("the vocabulary (", c.vocab_size, " tokens) is padded to ", ex.padded_vocab,
                            " rows for tensor size ", ex.tp, " (Tessera's checkpoint had ", c.padded_vocab_size, ")"));
  return notes;
}

}  // namespace tessera::ckpt
