#include "ckpt/megatron_dist.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_layout.h"
#include "ckpt/megatron_names.h"
#include "ckpt/megatron_optimizer.h"
#include "ckpt/megatron_rng.h"
#include "model/model_factory.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;  // as megatron_legacy.cc (the layer builds as unity batches)

namespace {

// Where one Tessera tensor (or one half of it) is in the DCP checkpoint.
struct DistSource {
  const DcpEntry* entry = nullptr;
  int64_t layer = -1;  // the index along a stacked key's leading axis; -1: the whole entry
  // Mixture of experts: the index along the experts' axis (after the layers' where stacked); -1: none.
  int64_t expert = -1;
  int part = 0;        // 0 the whole tensor; SwiGLU's fc1 under singleton_local_shards: 1 the gate (_w), 2 the up (_v)
};

Shape source_shape(const DistSource& s) {
  const size_t drop = (s.layer >= 0) + (s.expert >= 0);
  TESSERA_CHECK(s.entry->size.size() >= drop, s.entry->key, " is ", shape_str(s.entry->size), ", without the ", drop,
                " leading axes (layers, experts) Megatron's sharded keys give it");
  return Shape(s.entry->size.begin() + static_cast<std::ptrdiff_t>(drop), s.entry->size.end());
}

// Megatron-Core's sharded keys of the experts (SequentialMLP's, which Transformer Engine's grouped GEMM
// writes too), after "decoder.layers." or "decoder.layers.N.": "mlp.experts.experts.linear_fc1.weight" with an
// axis of the global experts, or under singleton_local_shards "mlp.experts.experts.G.linear_fc1.weight", one
// key per global expert G. Returns the part after the expert ("linear_fc1.weight"), empty for another key;
// `expert` is G, or -1 for the axis.
std::string dist_expert_key(const std::string& rest, int64_t* expert) {
  static constexpr std::string_view kExperts = "mlp.experts.experts.";
  *expert = -1;
  if (!rest.starts_with(kExperts)) return "";
  std::string after = rest.substr(kExperts.size());
  const size_t dot = after.find('.');
  if (dot != std::string::npos && dot > 0 && std::all_of(after.begin(), after.begin() + static_cast<std::ptrdiff_t>(dot),
                                                         [](char ch) { return ch >= '0' && ch <= '9'; })) {
    *expert = std::stoll(after.substr(0, dot));
    after = after.substr(dot + 1);
  }
  return after;
}

// The part of a transformer layer's key before its own names: "decoder.layers.N." for a decoder layer,
// "mtp.layers.K.transformer_layer." for a multi-token prediction module's (whose keys Megatron-Core never
// stacks: its MTP block hands the layers no offset); empty for any other key.
std::string dist_layer_prefix(const MegatronKey& k) {
  if (k.layer >= 0) return k.name.substr(0, k.name.size() - k.rest.size());
  static constexpr std::string_view kMtpLayer = ".transformer_layer.";
  if (!k.name.starts_with("mtp.layers.")) return "";
  const size_t at = k.name.find(kMtpLayer);
  return at == std::string::npos ? std::string() : k.name.substr(0, at + kMtpLayer.size());
}

// The sets of keys a checkpoint holds per tensor: the model's, Adam's two moments, the fp32 master weights.
enum DistSet { kDistWeights, kDistExpAvg, kDistExpAvgSq, kDistMaster, kDistSets };

// The set a DCP key belongs to, with its model key; -1 for other optimizer entries.
int dist_set(const std::string& key, std::string* model_key) {
  static constexpr std::pair<std::string_view, int> kPrefixes[] = {{"optimizer.state.exp_avg.", kDistExpAvg},
                                                                    {"optimizer.state.exp_avg_sq.", kDistExpAvgSq},
                                                                    {"optimizer.state.fp32_param.", kDistMaster},
                                                                    {"optimizer.state.param.", kDistMaster}};
  for (const auto& [prefix, set] : kPrefixes)
    if (key.starts_with(prefix)) {
      *model_key = key.substr(prefix.size());
      return set;
    }
  if (key.starts_with("optimizer.")) return -1;
  *model_key = key;
  return kDistWeights;
}

}  // namespace

MegatronDistCheckpoint open_megatron_dist(const std::string& load_dir, int64_t step) {
  MegatronDistCheckpoint ck;
  ck.load_dir = load_dir;
  const MegatronIteration found = find_megatron_iteration(load_dir, step);
  ck.iteration = found.iteration;
  ck.iteration_dir = found.iteration_dir;
  const fs::path iter(found.iteration_dir);
  std::error_code ec;
  TESSERA_CHECK(megatron_checkpoint_format(found) == "torch_dist", "convert --loader megatron: ", iter.string(),
                " is not a torch_dist checkpoint (it has no metadata.json)");

  const fs::path meta = iter / "metadata.json";
  TESSERA_CHECK(fs::is_regular_file(meta, ec), "convert --loader megatron: ", meta.string(),
                " is missing: Megatron's distributed checkpoints record their backend in it");
  nlohmann::json backends;
  {
    std::ifstream in(meta);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    backends = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    TESSERA_CHECK(backends.is_object(), meta.string(), ": is not a JSON object");
  }
  const std::string sharded = backends.value("sharded_backend", std::string());
  TESSERA_CHECK(sharded != "zarr", meta.string(), ": sharded_backend 'zarr': Megatron-LM removed the zarr format ",
                "(January 2026), and Tessera does not read it; convert it to torch_dist with a Megatron-LM that still ",
                "reads zarr (its tools/checkpoint or a load and save with --ckpt-format torch_dist)");
  TESSERA_CHECK(sharded == "torch_dist", meta.string(), ": sharded_backend '", sharded,
                "' is not read; only torch_dist (PyTorch DCP) is");
  const std::string common = backends.value("common_backend", std::string("torch"));
  TESSERA_CHECK(common == "torch", meta.string(), ": common_backend '", common, "' is not read; only torch (common.pt) is");

  ck.common_file = (iter / "common.pt").string();
  TESSERA_CHECK(fs::is_regular_file(ck.common_file, ec), "convert --loader megatron: ", ck.common_file,
                " is missing: it holds the checkpoint's args, without which the model cannot be known");
  const StateNode root = load_torch_file(ck.common_file);
  TESSERA_CHECK(root.is(StateNode::Kind::Dict), ck.common_file, ": holds a ", state_kind_name(root.kind),
                ", not Megatron's common state dict");
  const StateNode* args = root.find("args");
  TESSERA_CHECK(args, ck.common_file, ": has no 'args' (Megatron saves its arguments in every checkpoint); the model "
                "cannot be known without them");
  ck.args = read_megatron_args(*args, ck.common_file + ": args");
  const StateNode* version = root.find("checkpoint_version");
  const double v = !version                       ? 0
                   : version->is(StateNode::Kind::Float) ? version->real
                   : version->is(StateNode::Kind::Int)   ? static_cast<double>(version->integer)
                                                         : -1;
  TESSERA_CHECK(v >= 2.0, ck.common_file, ": checkpoint_version ",
                version ? std::to_string(v) : std::string("absent (0)"),
                " stores the fused QKV in an older order; only versions 2.0 and later convert");
  if (const StateNode* it = root.find("iteration"); it && it->is(StateNode::Kind::Int) && !found.release)
    ck.iteration = it->integer;
  if (const StateNode* opt = root.find("optimizer")) ck.optimizer_steps = megatron_optimizer_step(*opt);
  ck.dcp = DcpCheckpoint::open(iter.string());
  // Megatron's rng_state ShardedObject of pipeline stage 0, tensor rank 0 (data rank 0 under expert
  // parallelism, which adds that axis): its seed is Tessera's (megatron_rng.h).
  for (const DcpEntry& e : ck.dcp.entries())
    if (!e.tensor && (e.key.rfind("rng_state/shard_0.0_", 0) == 0 || e.key.rfind("rng_state/shard_0.0.0_", 0) == 0)) {
      const std::string where = str_cat(ck.dcp.metadata_path(), ": ", e.key);
      try {
        const StateNode rng = ck.dcp.read_object(e);
        read_megatron_rng_state(&rng, where, ck.args);
      } catch (const Error& err) {  // Megatron's --no-load-rng resumes such a checkpoint too
        ck.args.notes.push_back(str_cat(where, " could not be read (", err.what(), "); Tessera's seed is the args' ",
                                        ck.args.seed));
      }
      break;
    }
  // A BERT: its keys say so (the args do not).
  for (const DcpEntry& e : ck.dcp.entries())
    if (megatron_bert_key(e.key)) {
      set_megatron_bert(ck.args, ck.common_file + ": args");
      break;
    }
  return ck;
}

MegatronTensors read_megatron_dist(const MegatronDistCheckpoint& ck, const model::ModelConfig& given, bool optimizer) {
  MegatronTensors out;
  std::vector<std::string>& notes = out.notes;
  const DcpCheckpoint& dcp = ck.dcp;
  const std::string& md = dcp.metadata_path();
  model::ModelConfig c = given;

  // Tessera name -> where it is, per set: the model's keys, and the optimizer's per state.
  std::array<std::map<std::string, std::vector<DistSource>>, kDistSets> sets;
  int64_t optimizer_entries = 0;
  std::string buckets;  // a key of the distributed optimizer's dp_reshardable buckets, if any
  static constexpr std::string_view kLayers = "decoder.layers.";
  // One layer's key (k), at index `stacked` of a stacked entry's layers (-1: the entry is the layer's own):
  // an expert key becomes each expert's Tessera name, the per-expert form the legacy reader gives.
  const auto add_source = [&](int set, const DcpEntry& e, const MegatronKey& k, int64_t stacked, int part) {
    int64_t expert = -1;
    const std::string layer = dist_layer_prefix(k);
    const std::string after = layer.empty() ? std::string() : dist_expert_key(k.name.substr(layer.size()), &expert);
    if (after.empty()) {
      sets[set][k.name].push_back({&e, stacked, -1, part});
      return;
    }
    const auto name = [&](int64_t g) { return str_cat(layer, "mlp.experts.local_experts.", g, ".", after); };
    if (expert >= 0) {
      sets[set][name(expert)].push_back({&e, stacked, -1, part});
      return;
    }
    const size_t axis = stacked >= 0 ? 1 : 0;
    TESSERA_CHECK(e.size.size() > axis, "convert: ", md, ": ", e.key, " is ", shape_str(e.size),
                  ", without the experts' axis");
    for (int64_t g = 0; g < e.size[axis]; ++g) sets[set][name(g)].push_back({&e, stacked, g, part});
  };
  for (const DcpEntry& e : dcp.entries()) {
    std::string key;
    const int set = dist_set(e.key, &key);
    if (set != kDistWeights) ++optimizer_entries;
    if (buckets.empty() && e.key.starts_with("optimizer.distributed.")) buckets = e.key;
    if (set < 0 || !e.tensor) continue;  // ShardedObjects: Transformer Engine's _extra_state, rng_state, ...
    int part = 0;
    for (const auto& [suffix, p] : {std::pair{std::string_view("_w"), 1}, std::pair{std::string_view("_v"), 2}})
      if (key.ends_with(suffix) && key.find("linear_fc1.") != std::string::npos) {
        key.resize(key.size() - suffix.size());
        part = p;
      }
    const MegatronKey k = megatron_key(key);
    if (k.kind == MegatronKey::Kind::NotAWeight) continue;
    if (k.name.starts_with(kLayers) && k.layer < 0) {  // stacked: [num_layers, ...] (a BERT's "encoder.layers.")
      TESSERA_CHECK(!e.size.empty() && e.size[0] == c.num_layers, "convert: ", md, ": ", e.key, " is ",
                    shape_str(e.size), ", whose leading axis (Megatron's stacked layers) should be num_layers ",
                    c.num_layers);
      const std::string rest = k.name.substr(kLayers.size());
      for (int64_t l = 0; l < e.size[0]; ++l) {
        const MegatronKey layer = megatron_key(str_cat(kLayers, l, ".", rest));
        if (layer.kind == MegatronKey::Kind::NotAWeight) continue;
        add_source(set, e, layer, l, part);
      }
    } else {
      add_source(set, e, k, -1, part);
    }
  }
  const std::map<std::string, std::vector<DistSource>>& sources = sets[kDistWeights];

  if (c.padded_vocab_size == 0) {  // args without padded_vocab_size: the embedding's rows tell it
    const auto it = sources.find("embedding.word_embeddings.weight");
    TESSERA_CHECK(it != sources.end() && it->second[0].entry->size.size() == 2, "convert: ", md,
                  " has no word embeddings and the args no padded_vocab_size");
    c.padded_vocab_size = it->second[0].entry->size[0];
    if (c.vocab_size == 0 || c.vocab_size > c.padded_vocab_size) c.vocab_size = c.padded_vocab_size;
  }
  model::validate_config(c);

  // Every parameter of the model, its shape checked against the metadata before anything is read.
  model::ParameterSet declared;
  model::build_model_chunk(c, declared);  // declares the shapes, allocates nothing
  std::set<std::string> used;
  struct Job {
    std::string name;
    int set;
    std::vector<DistSource> parts;
  };
  std::vector<Job> jobs;
  const auto add_job = [&](int set, const std::string& name, const Shape& shape, std::vector<DistSource> parts) {
    std::sort(parts.begin(), parts.end(), [](const DistSource& a, const DistSource& b) { return a.part < b.part; });
    const bool split = parts.size() == 2 && parts[0].part == 1 && parts[1].part == 2;
    TESSERA_CHECK(split || (parts.size() == 1 && parts[0].part == 0), "convert: ", md, ": ", name,
                  " is held by ", parts.size(), " keys (", parts[0].entry->key, parts.size() > 1 ? ", " : "",
                  parts.size() > 1 ? parts[1].entry->key : std::string(), ")",
                  split ? "" : "; expected one, or the gate and up halves _w and _v");
    Shape have = source_shape(parts[0]);
    if (split) {
      const Shape up = source_shape(parts[1]);
      TESSERA_CHECK(!have.empty() && have.size() == up.size() && std::equal(have.begin() + 1, have.end(), up.begin() + 1),
                    "convert: ", md, ": ", parts[0].entry->key, " and ", parts[1].entry->key,
                    " (the gate and up halves) have shapes ", shape_str(have), " and ", shape_str(up));
      have[0] += up[0];
    }
    const DistSource& s = parts[0];
    TESSERA_CHECK(have == shape, "convert: ", md, ": ", s.entry->key, " has shape ", shape_str(s.entry->size),
                  s.layer >= 0 ? str_cat(" (", shape_str(source_shape(s)), " per layer)") : std::string(),
                  split ? " with its other half" : "", " but the model the checkpoint's args (and the flags given) ",
                  "describe needs ", shape_str(shape), s.layer >= 0 ? " per layer" : "", " (", name, ")");
    jobs.push_back({name, set, std::move(parts)});
  };
  for (const model::Parameter& p : declared.params()) {
    const std::string& name = p.spec.name;
    const std::string source = megatron_stack_name(name);
    const auto it = sources.find(source);
    TESSERA_CHECK(it != sources.end(), "convert: ", md, " holds no tensor for ", name, ", which this model has");
    add_job(kDistWeights, name, p.spec.shape, it->second);
    used.insert(source);
    if (!optimizer || megatron_buffer_key(name)) continue;  // the expert bias: outside Megatron's optimizer
    // Megatron's default for the distributed optimizer: flat buckets per data-parallel group, whose layout
    // depends on its bucketing; only the fully reshardable per-parameter format maps back to parameters.
    TESSERA_CHECK(buckets.empty(), md, ": ", buckets, " holds the distributed optimizer's state in its dp_reshardable "
                  "buckets, which are not read: save from Megatron with --dist-ckpt-optim-fully-reshardable "
                  "(per-parameter optimizer.state.* keys), or resume with --no-load-optim (the weights alone)");
    for (const int set : {kDistExpAvg, kDistExpAvgSq, kDistMaster}) {
      const auto found = sets[set].find(source);
      TESSERA_CHECK(found != sets[set].end() || set == kDistMaster, md, " has no optimizer.state.",
                    set == kDistExpAvg ? "exp_avg." : "exp_avg_sq.", it->second[0].entry->key, " (Adam's state of ", name,
                    "): the checkpoint's optimizer state is incomplete or in a format not read (resume with "
                    "--no-load-optim)");
      if (found != sets[set].end()) add_job(set, name, p.spec.shape, found->second);
    }
  }

  // Read in the files' order of keys and layers, so a chunk that spans several layers is read once.
  std::vector<std::pair<size_t, size_t>> order;  // (job, part)
  for (size_t j = 0; j < jobs.size(); ++j)
    for (size_t q = 0; q < jobs[j].parts.size(); ++q) order.emplace_back(j, q);
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    const DistSource &x = jobs[a.first].parts[a.second], &y = jobs[b.first].parts[b.second];
    return std::tuple(x.entry, x.layer, x.expert) < std::tuple(y.entry, y.layer, y.expert);
  });
  std::vector<std::vector<Tensor>> read(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) read[j].resize(jobs[j].parts.size());
  // An experts' entry is read a layer (or, unstacked, an expert) at a time: the experts of one layer follow
  // each other in `order`, so the layer's rows are read once and each expert's cut from them.
  std::pair<const DcpEntry*, int64_t> held{nullptr, -1};
  Tensor layer_rows;
  for (const auto& [j, q] : order) {
    const DistSource& s = jobs[j].parts[q];
    Tensor t;
    if (s.expert >= 0 && s.layer >= 0) {
      if (held != std::pair(s.entry, s.layer)) {
        layer_rows = megatron_to_fp32(dcp.read(*s.entry, s.layer, 1), md, s.entry->key);
        held = {s.entry, s.layer};
      }
      const Shape one = source_shape(s);
      int64_t per = 1;
      for (const int64_t d : one) per *= d;
      t = hf_layout::rows(layer_rows.view({s.entry->size[1], per}), s.expert, 1).clone();
      read[j][q] = t.view(one);
      continue;
    }
    t = s.layer >= 0 ? dcp.read(*s.entry, s.layer, 1) : s.expert >= 0 ? dcp.read(*s.entry, s.expert, 1) : dcp.read(*s.entry);
    t = t.view(source_shape(s));
    read[j][q] = megatron_to_fp32(t, md, s.entry->key);
  }
  std::map<std::string, Tensor> masters;
  for (size_t j = 0; j < jobs.size(); ++j) {
    Tensor whole = read[j].size() == 1 ? read[j][0] : hf_layout::concat_rows(read[j]);
    switch (jobs[j].set) {
      case kDistWeights: out.model.emplace_back(jobs[j].name, whole); break;
      case kDistExpAvg: out.exp_avg.emplace_back(jobs[j].name, whole); break;
      case kDistExpAvgSq: out.exp_avg_sq.emplace_back(jobs[j].name, whole); break;
      default: masters[jobs[j].name] = whole;
    }
  }
  for (auto& [name, t] : out.model)
    if (const auto m = masters.find(name); m != masters.end()) t = m->second;
  std::vector<std::pair<std::string, Tensor>>& tensors = out.model;

  // A tied model keeps one tensor; a saved copy (which Megatron's sharded state dict folds into the
  // embedding's key) is compared with it.
  if (!c.untie_embeddings_and_output_weights)
    if (const auto it = sources.find("output_layer.weight"); it != sources.end() && it->second.size() == 1) {
      const DistSource& s = it->second[0];
      for (const auto& [name, t] : tensors)
        if (name == "embedding.word_embeddings.weight")
          if (std::string note = megatron_tied_copy_note(megatron_to_fp32(dcp.read(*s.entry), md, s.entry->key), t,
                                                         s.entry->key, md);
              !note.empty())
            notes.push_back(std::move(note));
      used.insert("output_layer.weight");
    }

  std::string unused;
  int listed = 0;
  std::set<std::string> named;
  for (const auto& [name, list] : sources)
    if (!used.count(name) && named.insert(list[0].entry->key).second && listed++ < 8)
      unused += str_cat(listed > 1 ? ", " : " ", list[0].entry->key);
  TESSERA_CHECK(unused.empty(), "convert: ", md, " has tensors this model does not use:", unused,
                listed > 8 ? str_cat(" and ", listed - 8, " more") : std::string(),
                " (a T5 model, shared experts, or args that describe another model)");
  if (optimizer_entries > 0 && !optimizer)
    notes.push_back(str_cat("the checkpoint's optimizer state (", optimizer_entries,
                            " optimizer.* entries) is not carried: train on with --finetune, or --no-load-optim "
                            "(tessera train --load of the Megatron directory itself carries it)"));
  out.optimizer_steps = ck.optimizer_steps;
  out.config = c;
  return out;
}

std::vector<std::string> import_megatron_dist(const MegatronDistCheckpoint& ck, const model::ModelConfig& given,
                                              const std::string& save_dir) {
  const MegatronTensors read = read_megatron_dist(ck, given, /*optimizer=*/false);
  const MegatronArgs& a = ck.args;
  save_megatron_import(save_dir, read.config, a, ck.iteration,
                       {{"format", "megatron torch_dist"},
                        {"load_dir", fs::absolute(ck.load_dir).lexically_normal().string()},
                        {"iteration", ck.iteration},
                        {"tensor_model_parallel_size", a.tensor_parallel},
                        {"pipeline_model_parallel_size", a.pipeline_parallel},
                        {"virtual_pipeline_model_parallel_size", a.virtual_pipeline}},
                       read.model);
  return read.notes;
}

}  // namespace tessera::ckpt
