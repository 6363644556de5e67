#include "ckpt/megatron_legacy.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_layout.h"
#include "ckpt/megatron_names.h"
#include "ckpt/megatron_optimizer.h"
#include "ckpt/megatron_rng.h"
#include "model/model_factory.h"

namespace tessera::ckpt {

// As torch_file.cc (an alias of the same type may be declared again: the layer builds as unity batches).
using SK = StateNode::Kind;
namespace fs = std::filesystem;

namespace {

constexpr const char* kMegatronTracker = "latest_checkpointed_iteration.txt";
constexpr const char* kMegatronFile = "model_optim_rng.pt";

// One tensor-parallel shard as the file holds it, for errors that name the file and Megatron's key.
struct MegatronShard {
  Tensor tensor;
  std::string file, key;
};

// The tensors of one pipeline chunk: every tensor rank's shards by Tessera name (local layer index).
struct MegatronChunk {
  std::map<std::string, std::vector<MegatronShard>> tensors;
  std::vector<MegatronShard> tied_copies;  // the last stage's copy of tied embeddings
  std::vector<MegatronShard> position_copies;  // multi-token prediction's last-stage copy of learned positions
  int64_t layers = 0;
};

std::string read_tracker(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  s.erase(0, s.find_first_not_of(" \t\r\n"));
  return s;
}

Tensor megatron_fp32(const MegatronShard& s) { return megatron_to_fp32(s.tensor, s.file, s.key); }

// The state dict's leaves with dotted keys: the legacy model nests dicts (language_model -> encoder ->
// "layers.0...."), Megatron-Core's is flat.
void flatten_state(const StateNode& node, const std::string& prefix, const std::string& file,
                   std::vector<MegatronShard>& out) {
  for (const StateEntry& e : node.entries) {
    const std::string key = prefix.empty() ? e.key : prefix + "." + e.key;
    if (e.value.is(SK::Dict)) {
      flatten_state(e.value, key, file, out);
    } else if (e.value.is(SK::Tensor)) {
      out.push_back({e.value.tensor, file, key});
    } else {
      // Transformer Engine's _extra_state is None or an io.BytesIO; nothing else in a model is not a tensor.
      TESSERA_CHECK(megatron_key(key).kind == MegatronKey::Kind::NotAWeight, file, ": ", key, " is a ",
                    state_kind_name(e.value.kind), ", not a tensor");
    }
  }
}

// The chunks one file holds: "model", or "model0", "model1", ... with an interleaved pipeline.
std::vector<const StateNode*> model_chunks(const StateNode& root, int64_t virtual_chunks, const std::string& file) {
  if (const StateNode* m = root.find("model")) return {m};
  std::vector<const StateNode*> out;
  for (int64_t v = 0; v < virtual_chunks; ++v) {
    const StateNode* m = root.find(str_cat("model", v));
    TESSERA_CHECK(m, file, ": has no 'model'", v ? str_cat(" nor 'model", v, "' (args.virtual_pipeline_model_parallel_size = ",
                                                           virtual_chunks, ")")
                                                 : std::string(),
                  "; it is not a Megatron model checkpoint (saved with --no-save-model?)");
    out.push_back(m);
  }
  return out;
}

// Sorts one chunk's keys (of every tensor rank) into Tessera names.
void add_to_chunk(const std::vector<MegatronShard>& leaves, MegatronChunk& chunk) {
  for (const MegatronShard& s : leaves) {
    const MegatronKey k = megatron_key(s.key);
    if (k.kind == MegatronKey::Kind::NotAWeight) continue;
    if (k.kind == MegatronKey::Kind::TiedCopy) {
      chunk.tied_copies.push_back(s);
      continue;
    }
    chunk.tensors[k.name].push_back(s);
    if (k.layer >= 0) chunk.layers = std::max(chunk.layers, k.layer + 1);
  }
}

// "decoder.layers.3.mlp..." -> "decoder.layers.{3 + offset}.mlp...".
std::string shift_layer(const std::string& name, int64_t offset) {
  const MegatronKey k = megatron_key(name);
  return k.layer < 0 ? name : str_cat("decoder.layers.", k.layer + offset, ".", k.rest);
}

std::string shape_of(const Shape& s) { return shape_str(s); }

// The shard shape rank r of `ranks` holds of a tensor `whole` split as `split`, or an error.
Shape expected_shard(const std::string& name, const Shape& whole, MegatronSplit split, int64_t ranks) {
  Shape s = whole;
  if (split == MegatronSplit::Replicated) return s;
  const size_t dim = split == MegatronSplit::Columns ? 1 : 0;
  const int64_t parts = split == MegatronSplit::GatedRows ? 2 * ranks : ranks;
  TESSERA_CHECK(dim < s.size() && s[dim] % parts == 0, "convert: ", name, " is ", shape_of(whole),
                " for this model, which does not split ", megatron_split_name(split), " over ", ranks,
                " tensor-parallel ranks");
  s[dim] /= ranks;
  return s;
}

// The shards of one tensor put together.
Tensor merge_shards(const std::vector<MegatronShard>& shards, MegatronSplit split) {
  std::vector<Tensor> parts;
  for (const MegatronShard& s : shards) parts.push_back(megatron_fp32(s));
  switch (split) {
    case MegatronSplit::Replicated:
      return parts[0];
    case MegatronSplit::Rows:
      return hf_layout::concat_rows(parts);
    case MegatronSplit::GatedRows: {
      // Rank r holds [gate_r; up_r]: the whole is [gate_0; gate_1; ...; up_0; up_1; ...].
      std::vector<Tensor> gates, ups;
      for (const Tensor& p : parts) {
        const int64_t half = p.shape()[0] / 2;
        gates.push_back(hf_layout::rows(p, 0, half));
        ups.push_back(hf_layout::rows(p, half, half));
      }
      gates.insert(gates.end(), ups.begin(), ups.end());
      return hf_layout::concat_rows(gates);
    }
    case MegatronSplit::Columns: {
      const int64_t rows = parts[0].shape()[0], cols = parts[0].shape()[1];
      const int64_t n = static_cast<int64_t>(parts.size());
      Tensor out = Tensor::empty({rows, cols * n});
      for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < rows; ++i)
          std::copy(parts[r].host_f32() + i * cols, parts[r].host_f32() + (i + 1) * cols,
                    out.host_f32() + i * cols * n + r * cols);
      return out;
    }
  }
  return parts[0];
}

// Whole tensors' shards by global name (tensor rank order), each chunk's local layer numbers shifted by the
// layers of the chunks before it; `layers` (when given) is set to their total.
std::map<std::string, std::vector<MegatronShard>> global_shards(std::vector<MegatronChunk>& chunks, int64_t tp,
                                                                int64_t* layers) {
  std::map<std::string, std::vector<MegatronShard>> sources;
  int64_t before = 0;
  for (MegatronChunk& chunk : chunks) {
    for (auto& [name, shards] : chunk.tensors) {
      const std::string global = shift_layer(name, before);
      // With multi-token prediction the last stage keeps its own copy of the word embeddings (the modules
      // embed the shifted tokens): Megatron keeps it equal to the first stage's, as a tied output layer's.
      if (global == "embedding.word_embeddings.weight" && sources.count(global) && chunk.tied_copies.empty()) {
        chunk.tied_copies = std::move(shards);
        continue;
      }
      // And of the learned absolute position embedding (the modules look the rolled positions up).
      if (global == "embedding.position_embeddings.weight" && sources.count(global) && chunk.position_copies.empty()) {
        chunk.position_copies = std::move(shards);
        continue;
      }
      TESSERA_CHECK(!sources.count(global), "convert: ", shards[0].file, ": ", shards[0].key, " is ", global,
                    ", which another pipeline chunk holds too");
      TESSERA_CHECK(static_cast<int64_t>(shards.size()) == tp, "convert: ", shards[0].key, " is in ", shards.size(),
                    " of the ", tp, " tensor ranks' files of its stage (", shards[0].file, ")");
      sources[global] = std::move(shards);
    }
    before += chunk.layers;
  }
  if (layers) *layers = before;
  return sources;
}

bool is_expert_key(const std::string& key) {
  bool expert = false;
  megatron_global_expert_key(key, 0, 1, &expert);
  return expert;
}

using Leaves = std::vector<std::vector<MegatronShard>>;  // one file's leaves, chunk by chunk

// Fills `avg` and `sq` (copies of `leaves`) with Adam's moments of the leaves `include` selects, from one
// torch optimizer state dict (read_megatron_legacy_optimizer: its numbers stand for those leaves in their
// order), and puts the fp32 master weights, where saved, in `leaves`.
void attach_moments(const StateNode& opt, const std::string& file, Leaves& leaves, Leaves& avg, Leaves& sq,
                    bool (*include)(const std::string&), int64_t* steps) {
  const auto selected = [&](const MegatronShard& s) {
    return megatron_key(s.key).kind != MegatronKey::Kind::NotAWeight && !megatron_buffer_key(s.key) && include(s.key);
  };
  std::vector<MegatronParamShard> shapes;
  for (const auto& chunk : leaves)
    for (const MegatronShard& s : chunk)
      if (selected(s)) shapes.push_back({s.key, s.tensor.shape()});
  if (shapes.empty()) return;  // a stage without experts: the experts' optimizer has nothing of this file's
  const MegatronOptimizerShards o = read_megatron_legacy_optimizer(opt, file, shapes);
  if (*steps < 0) *steps = o.step;
  size_t k = 0;
  for (size_t v = 0; v < leaves.size(); ++v)
    for (size_t i = 0; i < leaves[v].size(); ++i) {
      if (!selected(leaves[v][i])) continue;
      avg[v][i].tensor = o.exp_avg[k];
      sq[v][i].tensor = o.exp_avg_sq[k];
      if (o.master[k].defined()) leaves[v][i].tensor = o.master[k];
      ++k;
    }
}

bool any_key(const std::string&) { return true; }
bool dense_key(const std::string& key) { return !is_expert_key(key); }

// A file's "optimizer": a torch optimizer state dict (megatron_optimizer.h), or for a mixture of experts
// Megatron-Core's ChainedOptimizer's list [the dense parameters' optimizer, the experts'] (the experts have
// an optimizer of their own, over the expert-data-parallel group); `chained` asks for the list.
const StateNode& legacy_optimizer_entry(const StateNode& root, const std::string& file, bool chained) {
  // Megatron's legacy distributed optimizer keeps the moments in flat per-bucket buffers beside the file,
  // laid out by its data-parallel sharding: not mapped back to parameters here.
  const fs::path flat = fs::path(file).parent_path() / "distrib_optim.pt";
  TESSERA_CHECK(!fs::exists(flat), flat.string(), ": the distributed optimizer's flat buffers (args."
                "use_distributed_optimizer) are not read: resume with --no-load-optim (the weights alone), or "
                "save from Megatron with --ckpt-format torch_dist --dist-ckpt-optim-fully-reshardable");
  const StateNode* opt = root.find("optimizer");
  TESSERA_CHECK(opt && (opt->is(SK::Dict) || opt->is(SK::List)), file, ": has no optimizer state (saved with "
                "--no-save-optim?): resume with --no-load-optim, or --finetune");
  if (chained)
    TESSERA_CHECK(opt->is(SK::List) && opt->items.size() == 2 && opt->items[0].is(SK::Dict) && opt->items[1].is(SK::Dict),
                  file, ": optimizer is a ", state_kind_name(opt->kind), opt->is(SK::List) ? str_cat(" of ", opt->items.size()) : "",
                  ", not the list of two optimizer state dicts (the dense parameters', the experts') that Megatron-Core's "
                  "ChainedOptimizer saves for a mixture of experts: resume with --no-load-optim");
  else
    TESSERA_CHECK(opt->is(SK::Dict), file, ": optimizer is a ", state_kind_name(opt->kind), ", not an optimizer's state dict");
  return *opt;
}

// Mixture of experts: the experts of expert rank 0 (in `leaves`, from files[p][t]) and of the other expert
// ranks' files of tensor rank t of stage p, under their global numbers in the per-expert form; with `avg` and
// `sq` (the moments of `leaves`, shaped as it) also each other file's experts' moments, from the experts'
// optimizer of its chained list. The other files' dense tensors are the same as expert rank 0's and are not
// read again.
void add_expert_ranks(const MegatronLegacyCheckpoint& ck, int64_t p, int64_t t, int64_t vp, int64_t local_experts,
                      Leaves& leaves, Leaves* avg, Leaves* sq, int64_t* steps) {
  bool expert = false;
  const auto globalise = [&](Leaves& all, int64_t rank) {
    for (auto& chunk : all)
      for (MegatronShard& s : chunk) s.key = megatron_global_expert_key(s.key, rank, local_experts, &expert);
  };
  globalise(leaves, 0);
  if (avg) globalise(*avg, 0), globalise(*sq, 0);
  for (size_t x = 0; x < ck.expert_files[p][t].size(); ++x) {
    const std::string& file = ck.expert_files[p][t][x];
    const StateNode root = load_torch_file(file);
    const std::vector<const StateNode*> models = model_chunks(root, vp, file);
    TESSERA_CHECK(static_cast<int64_t>(models.size()) == vp, file, ": holds ", models.size(), " model chunks, not ", vp);
    Leaves mine(static_cast<size_t>(vp));  // this file's experts, chunk by chunk, under its local numbers
    for (int64_t v = 0; v < vp; ++v) {
      std::vector<MegatronShard> all;
      flatten_state(*models[v], "", file, all);
      for (MegatronShard& s : all)
        if (is_expert_key(s.key)) mine[v].push_back(std::move(s));
    }
    Leaves mine_avg = mine, mine_sq = mine;
    if (avg)
      attach_moments(legacy_optimizer_entry(root, file, true).items[1], file + " (optimizer[1], the experts')", mine,
                     mine_avg, mine_sq, any_key, steps);
    const int64_t rank = static_cast<int64_t>(x) + 1;
    globalise(mine, rank);
    globalise(mine_avg, rank);
    globalise(mine_sq, rank);
    for (int64_t v = 0; v < vp; ++v) {
      leaves[v].insert(leaves[v].end(), mine[v].begin(), mine[v].end());
      if (avg) {
        (*avg)[v].insert((*avg)[v].end(), mine_avg[v].begin(), mine_avg[v].end());
        (*sq)[v].insert((*sq)[v].end(), mine_sq[v].begin(), mine_sq[v].end());
      }
    }
  }
}

}  // namespace

MegatronIteration find_megatron_iteration(const std::string& load_dir, int64_t step) {
  MegatronIteration found;
  found.load_dir = load_dir;
  const fs::path dir(load_dir);
  std::error_code ec;
  TESSERA_CHECK(fs::is_directory(dir, ec), "convert --loader megatron: --load-dir ", load_dir, " is not a directory");
  std::string sub;
  if (step >= 0) {
    sub = iteration_dir_name(step);  // Megatron's iter_{:07d}
    found.iteration = step;
  } else {
    const fs::path tracker = dir / kMegatronTracker;
    TESSERA_CHECK(fs::is_regular_file(tracker, ec), "convert --loader megatron: ", tracker.string(),
                  " is missing: ", load_dir, " is not a Megatron checkpoint directory (or give --ckpt-step N)");
    const std::string text = read_tracker(tracker);
    if (text == "release") {
      sub = "release";
      found.release = true;
    } else {
      int64_t n = -1;
      const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), n);
      TESSERA_CHECK(err == std::errc() && end == text.data() + text.size() && n >= 0, "convert --loader megatron: ",
                    tracker.string(), " holds '", text.substr(0, 40), "', not an iteration or 'release'");
      sub = iteration_dir_name(n);
      found.iteration = n;
    }
  }
  const fs::path iter = dir / sub;
  found.iteration_dir = iter.string();
  TESSERA_CHECK(fs::is_directory(iter, ec), "convert --loader megatron: ", iter.string(), " is missing",
                step >= 0 ? " (--ckpt-step)" : " (named by latest_checkpointed_iteration.txt)");
  return found;
}

std::string megatron_checkpoint_format(const MegatronIteration& it) {
  const fs::path iter(it.iteration_dir);
  std::error_code ec;
  const bool metadata_json = fs::exists(iter / "metadata.json", ec), dcp = fs::exists(iter / ".metadata", ec);
  if (metadata_json || dcp) return "torch_dist";
  return "torch";
}

MegatronLegacyCheckpoint open_megatron_legacy(const std::string& load_dir, int64_t step) {
  MegatronLegacyCheckpoint ck;
  ck.load_dir = load_dir;
  const MegatronIteration where = find_megatron_iteration(load_dir, step);
  ck.iteration = where.iteration;
  ck.iteration_dir = where.iteration_dir;
  const fs::path iter(where.iteration_dir);
  const std::string sub = where.release ? "release" : iter.filename().string();
  std::error_code ec;
  TESSERA_CHECK(megatron_checkpoint_format(where) == "torch", "convert --loader megatron: ", iter.string(),
                " is a torch_dist (distributed) checkpoint, not the legacy torch format");

  // mp_rank_TT (no pipeline), mp_rank_TT_PPP, and with expert parallelism an expert rank's _EEE after them
  // (mp_rank_TT_EEE without a pipeline: which one a second number is, the args tell).
  const std::regex rank_dir(R"(mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?)");
  std::set<std::array<int64_t, 3>> found;  // the numbers each directory name holds (-1: absent)
  std::string zero;                         // tensor rank 0 of stage 0 (and expert rank 0): the args
  for (const fs::directory_entry& e : fs::directory_iterator(iter)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (!e.is_directory() || !std::regex_match(name, m, rank_dir)) continue;
    std::array<int64_t, 3> n{};
    for (int i = 0; i < 3; ++i) n[i] = m[i + 1].matched ? std::stoll(m[i + 1].str()) : -1;
    found.insert(n);
    if (n[0] == 0 && n[1] <= 0 && n[2] <= 0) zero = name;
  }
  TESSERA_CHECK(!found.empty(), "convert --loader megatron: ", iter.string(), " holds no mp_rank_* directory");
  TESSERA_CHECK(!zero.empty(), "convert --loader megatron: ", iter.string(), " has no directory of tensor rank 0 ",
                "of pipeline stage 0 (mp_rank_00*)");
  std::set<int64_t> counts;
  for (const auto& n : found) counts.insert((n[1] >= 0) + (n[2] >= 0));
  TESSERA_CHECK(counts.size() == 1, "convert --loader megatron: ", iter.string(),
                " mixes mp_rank_TT, mp_rank_TT_PPP and mp_rank_TT_PPP_EEE directories");

  const std::string first = (iter / zero / kMegatronFile).string();
  TESSERA_CHECK(fs::is_regular_file(first, ec), "convert --loader megatron: ", first, " is missing");
  ck.first = load_torch_file(first);
  TESSERA_CHECK(ck.first.is(SK::Dict), first, ": holds a ", state_kind_name(ck.first.kind), ", not a checkpoint dict");
  const StateNode* args = ck.first.find("args");
  TESSERA_CHECK(args, first, ": has no 'args' (Megatron saves its arguments in every checkpoint); the model "
                "cannot be known without them");
  ck.args = read_megatron_args(*args, first + ": args");
  // The generators' seed (megatron_rng.h); checkpoints before get_rng_state's list kept the states at the top.
  const StateNode* rng = ck.first.find("rng_state");
  read_megatron_rng_state(rng ? rng : ck.first.find("cuda_rng_state") ? &ck.first : nullptr, first, ck.args);

  // Which number is which: a pipeline stage's when the args have pipeline (or the name all three).
  const int numbers = *counts.begin();
  const bool staged = numbers == 2 || (numbers == 1 && ck.args.expert_parallel == 1);
  const bool experts = numbers == 2 || (numbers == 1 && !staged);
  int64_t tp = 0, pp = 1, ep = 1;
  for (const auto& n : found) {
    tp = std::max(tp, n[0] + 1);
    if (staged) pp = std::max(pp, n[1] + 1);
    if (experts) ep = std::max(ep, (staged ? n[2] : n[1]) + 1);
  }
  ck.tensor_parallel = tp;
  ck.pipeline_parallel = pp;
  ck.expert_parallel = ep;
  ck.files.assign(static_cast<size_t>(pp), std::vector<std::string>(static_cast<size_t>(tp)));
  ck.expert_files.assign(static_cast<size_t>(pp), std::vector<std::vector<std::string>>(static_cast<size_t>(tp)));
  for (int64_t p = 0; p < pp; ++p)
    for (int64_t t = 0; t < tp; ++t)
      for (int64_t x = 0; x < ep; ++x) {
        std::string name = str_cat("mp_rank_", t < 10 ? "0" : "", t);
        if (staged) name += str_cat("_", p < 10 ? "00" : p < 100 ? "0" : "", p);
        if (experts) name += str_cat("_", x < 10 ? "00" : x < 100 ? "0" : "", x);
        const fs::path file = iter / name / kMegatronFile;
        TESSERA_CHECK(fs::is_regular_file(file, ec), "convert --loader megatron: ", file.string(), " is missing (the ",
                      "checkpoint has tensor ranks 0-", tp - 1, ", pipeline stages 0-", pp - 1,
                      ep > 1 ? str_cat(" and expert ranks 0-", ep - 1) : std::string(), ")");
        (x == 0 ? ck.files[p][t] : ck.expert_files[p][t].emplace_back()) = file.string();
      }

  // A BERT: its keys say so (the args do not), those of the last stage's files at least.
  const auto bert_keys = [&](const StateNode& root, const std::string& file) {
    std::vector<MegatronShard> leaves;
    for (const StateNode* m : model_chunks(root, std::max<int64_t>(1, ck.args.virtual_pipeline), file))
      if (m->is(SK::Dict)) flatten_state(*m, "", file, leaves);
    return std::any_of(leaves.begin(), leaves.end(), [](const MegatronShard& s) { return megatron_bert_key(s.key); });
  };
  bool bert = bert_keys(ck.first, first);
  if (!bert && pp > 1) bert = bert_keys(load_torch_file(ck.files[pp - 1][0]), ck.files[pp - 1][0]);
  if (bert) set_megatron_bert(ck.args, first + ": args");

  // Before checkpoint_version 2.0 the fused QKV rows were ordered otherwise (Megatron reorders them on load).
  const StateNode* version = ck.first.find("checkpoint_version");
  const double v = !version ? 0 : version->is(SK::Float) ? version->real : version->is(SK::Int) ? static_cast<double>(version->integer) : -1;
  TESSERA_CHECK(v >= 2.0, first, ": checkpoint_version ", version ? std::to_string(v) : std::string("absent (0)"),
                " stores the fused QKV in an older order; only versions 2.0 and later convert");
  if (const StateNode* it = ck.first.find("iteration"); it && it->is(SK::Int) && sub != "release") ck.iteration = it->integer;
  TESSERA_CHECK(ck.args.tensor_parallel == tp && ck.args.pipeline_parallel == pp && ck.args.expert_parallel == ep, first,
                ": args record tensor_model_parallel_size ", ck.args.tensor_parallel, ", pipeline_model_parallel_size ",
                ck.args.pipeline_parallel, " and expert_model_parallel_size ", ck.args.expert_parallel, " but ",
                iter.string(), " holds ", tp, " tensor, ", pp, " pipeline and ", ep, " expert ranks");
  for (const int64_t e : ck.args.config.moe.layer_experts)
    TESSERA_CHECK(e % ep == 0, first, ": args.num_experts ", e, " is not divisible by expert_model_parallel_size ", ep);
  TESSERA_CHECK(!ck.args.config.moe.enabled() || ck.args.expert_tensor_parallel == tp, first,
                ": the checkpoint was trained with args.expert_tensor_parallel_size set: an expert tensor-parallel size (",
                ck.args.expert_tensor_parallel, ") other than the tensor-parallel size (", tp, "): the legacy files' expert "
                "shards are not merged (a torch_dist checkpoint is read at any)");
  return ck;
}

MegatronTensors read_megatron_legacy(MegatronLegacyCheckpoint ck, const model::ModelConfig& given, bool optimizer) {
  MegatronTensors out;
  std::vector<std::string>& notes = out.notes;
  const int64_t tp = ck.tensor_parallel, pp = ck.pipeline_parallel, vp = std::max<int64_t>(1, ck.args.virtual_pipeline);
  const bool moe = ck.args.config.moe.enabled();
  const std::vector<int64_t>& layer_experts = ck.args.config.moe.layer_experts;
  const int64_t local_experts =
      moe ? *std::max_element(layer_experts.begin(), layer_experts.end()) / ck.expert_parallel : 0;
  // chunks[v * pp + p]: Megatron's order of the layers (chunk v of every stage, then chunk v + 1); with
  // `optimizer` the moments in chunks of their own, keyed as their weights.
  std::vector<MegatronChunk> chunks(static_cast<size_t>(vp * pp)), avg_chunks(chunks.size()), sq_chunks(chunks.size());
  for (int64_t p = 0; p < pp; ++p)
    for (int64_t t = 0; t < tp; ++t) {
      const std::string& file = ck.files[p][t];
      // The first file was read to find the model; each other is read once, and only its model kept.
      const StateNode root = p == 0 && t == 0 ? std::move(ck.first) : load_torch_file(file);
      const std::vector<const StateNode*> models = model_chunks(root, vp, file);
      TESSERA_CHECK(static_cast<int64_t>(models.size()) == vp, file, ": holds ", models.size(), " model chunks, not ", vp);
      std::vector<std::vector<MegatronShard>> leaves(static_cast<size_t>(vp));
      for (int64_t v = 0; v < vp; ++v) {
        TESSERA_CHECK(models[v]->is(SK::Dict), file, ": the model is a ", state_kind_name(models[v]->kind), ", not a state dict");
        flatten_state(*models[v], "", file, leaves[v]);
      }
      // With `optimizer`, the moments of each leaf (the file's parameters in named_parameters order: its
      // chunks' state dicts in turn), shaped as `leaves`.
      Leaves avg, sq;
      if (optimizer) {
        avg = leaves, sq = leaves;
        const StateNode& opt = legacy_optimizer_entry(root, file, moe);
        if (!moe) {
          attach_moments(opt, file, leaves, avg, sq, any_key, &out.optimizer_steps);
        } else {
          attach_moments(opt.items[0], file + " (optimizer[0], the dense parameters')", leaves, avg, sq, dense_key,
                         &out.optimizer_steps);
          attach_moments(opt.items[1], file + " (optimizer[1], the experts')", leaves, avg, sq, is_expert_key,
                         &out.optimizer_steps);
        }
      }
      if (moe) add_expert_ranks(ck, p, t, vp, local_experts, leaves, optimizer ? &avg : nullptr, &sq, &out.optimizer_steps);
      if (optimizer)
        for (int64_t v = 0; v < vp; ++v) {
          add_to_chunk(avg[v], avg_chunks[v * pp + p]);
          add_to_chunk(sq[v], sq_chunks[v * pp + p]);
        }
      for (int64_t v = 0; v < vp; ++v) add_to_chunk(leaves[v], chunks[v * pp + p]);
    }

  int64_t layers = 0;
  std::map<std::string, std::vector<MegatronShard>> sources = global_shards(chunks, tp, &layers), avg_sources, sq_sources;
  if (optimizer) {
    avg_sources = global_shards(avg_chunks, tp, nullptr);
    sq_sources = global_shards(sq_chunks, tp, nullptr);
  }

  model::ModelConfig c = given;
  if (c.padded_vocab_size == 0) {  // args without padded_vocab_size: the embedding's rows tell it
    const auto it = sources.find("embedding.word_embeddings.weight");
    TESSERA_CHECK(it != sources.end() && it->second[0].tensor.shape().size() == 2, "convert: ", ck.iteration_dir,
                  " has no word embeddings and its args no padded_vocab_size");
    c.padded_vocab_size = it->second[0].tensor.shape()[0] * tp;
    if (c.vocab_size == 0 || c.vocab_size > c.padded_vocab_size) c.vocab_size = c.padded_vocab_size;
  }
  TESSERA_CHECK(layers == c.num_layers, "convert: the pipeline chunks of ", ck.iteration_dir, " hold ", layers,
                " layers but the model has num_layers ", c.num_layers);
  model::validate_config(c);

  // Every parameter of the model, from its shards, each shard's shape checked.
  model::ParameterSet declared;
  model::build_model_chunk(c, declared);  // declares the shapes, allocates nothing
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::set<std::string> used;
  for (const model::Parameter& p : declared.params()) {
    const std::string& name = p.spec.name;
    const std::string source = megatron_stack_name(name);
    const auto it = sources.find(source);
    TESSERA_CHECK(it != sources.end(), "convert: no file of ", ck.iteration_dir, " holds ", name,
                  " (or its legacy language_model.* name), which this model has");
    const MegatronSplit split = megatron_split(name, c.swiglu);
    const Shape want = expected_shard(name, p.spec.shape, split, tp);
    for (const MegatronShard& s : it->second)
      TESSERA_CHECK(s.tensor.shape() == want, "convert: ", s.file, ": ", s.key, " has shape ", shape_of(s.tensor.shape()),
                    " but the model the checkpoint's args (and the flags given) describe needs ", shape_of(want),
                    " in each of its ", tp, " tensor-parallel shards (", name, " is ", shape_of(p.spec.shape),
                    " whole, split ", megatron_split_name(split), ")");
    tensors.emplace_back(name, merge_shards(it->second, split));
    used.insert(source);
    if (optimizer) {  // the moments' shards have their weights' shapes (checked as they were read)
      out.exp_avg.emplace_back(name, merge_shards(avg_sources.at(source), split));
      out.exp_avg_sq.emplace_back(name, merge_shards(sq_sources.at(source), split));
    }
  }
  // A tied model's last stage computes the logits with its own copy of the word embeddings, which
  // Megatron keeps equal to the first stage's by summing their gradients; Tessera has one tensor, the
  // embedding. A copy that drifted is reported (the model's outputs were the copy's).
  if (!c.untie_embeddings_and_output_weights || c.mtp_num_layers > 0) {
    std::vector<MegatronShard> copy;
    if (const auto it = sources.find("output_layer.weight"); it != sources.end() && !c.untie_embeddings_and_output_weights)
      copy = it->second;
    for (const MegatronChunk& chunk : chunks)
      if (!chunk.tied_copies.empty()) copy = chunk.tied_copies;
    Tensor embedding;
    for (const auto& [name, t] : tensors)
      if (name == "embedding.word_embeddings.weight") embedding = t;
    if (!copy.empty() && embedding.defined())
      if (std::string note = megatron_tied_copy_note(merge_shards(copy, MegatronSplit::Rows), embedding, copy[0].key,
                                                     copy[0].file);
          !note.empty())
        notes.push_back(std::move(note));
  }

  // Multi-token prediction's last-stage copy of learned absolute positions, kept equal alike.
  for (const MegatronChunk& chunk : chunks) {
    if (chunk.position_copies.empty()) continue;
    for (const auto& [name, t] : tensors)
      if (name == "embedding.position_embeddings.weight")
        if (std::string note = megatron_tied_copy_note(megatron_fp32(chunk.position_copies[0]), t,
                                                       chunk.position_copies[0].key, chunk.position_copies[0].file,
                                                       "position embedding");
            !note.empty())
          notes.push_back(std::move(note));
  }

  std::string unused;
  int listed = 0;
  for (const auto& [name, shards] : sources)
    if (!used.count(name) && !(name == "output_layer.weight" && !c.untie_embeddings_and_output_weights) && listed++ < 8)
      unused += str_cat(listed > 1 ? ", " : " ", shards[0].key, " (", shards[0].file, ")");
  for (const MegatronChunk& chunk : chunks)
    if (!chunk.tied_copies.empty() && c.untie_embeddings_and_output_weights && c.mtp_num_layers == 0 && listed++ < 8)
      unused += str_cat(listed > 1 ? ", " : " ", chunk.tied_copies[0].key, " (", chunk.tied_copies[0].file, ")");
  TESSERA_CHECK(unused.empty(), "convert: the Megatron checkpoint has tensors this model does not use:", unused,
                listed > 8 ? str_cat(" and ", listed - 8, " more") : std::string(),
                " (a T5 model, or args that describe another model)");

  out.config = c;
  out.model = std::move(tensors);
  return out;
}

std::vector<std::string> import_megatron_legacy(MegatronLegacyCheckpoint ck, const model::ModelConfig& given,
                                                const std::string& save_dir) {
  const std::string load_dir = ck.load_dir;
  const MegatronArgs args = ck.args;
  const int64_t iteration = ck.iteration, tp = ck.tensor_parallel, pp = ck.pipeline_parallel;
  const MegatronTensors read = read_megatron_legacy(std::move(ck), given, /*optimizer=*/false);
  save_megatron_import(save_dir, read.config, args, iteration,
                       {{"format", "megatron torch (legacy)"},
                        {"load_dir", fs::absolute(load_dir).lexically_normal().string()},
                        {"iteration", iteration},
                        {"tensor_model_parallel_size", tp},
                        {"pipeline_model_parallel_size", pp},
                        {"virtual_pipeline_model_parallel_size", std::max<int64_t>(1, args.virtual_pipeline)}},
                       read.model);
  return read.notes;
}

}  // namespace tessera::ckpt
