#include "ckpt/megatron_resume.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "ckpt/checkpoint_index.h"
#include "ckpt/megatron_dist.h"
#include "ckpt/megatron_legacy.h"
#include "ckpt/reshard.h"
#include "data/tokenizer_factory.h"
#include "kernels/tensor_ops.h"
#include "model/model_factory.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;  // as megatron_legacy.cc (the layer builds as unity batches)

namespace {

// The iteration directory the tracker of `load_dir` names ("iter_0000020" or "release"), or "" when it
// names none.
std::string tracked_iteration_dir(const fs::path& dir) {
  std::error_code ec;
  const fs::path tracker = dir / kTrackerFile;
  if (!fs::is_regular_file(tracker, ec)) return "";
  std::ifstream in(tracker);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  s.erase(0, s.find_first_not_of(" \t\r\n"));
  if (s == "release") return s;
  int64_t n = -1;
  const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (err != std::errc() || end != s.data() + s.size() || n < 0) return "";
  return iteration_dir_name(n);
}

// What --load needs before loading, read once per directory from the args alone.
struct MegatronResumeInfo {
  MegatronIteration where;
  bool dist = false;
  MegatronArgs args;
  model::ModelConfig config;  // the args' model, with the tokenizer's vocabulary
  nlohmann::json record;      // the args as a Tessera checkpoint records them
};

const MegatronResumeInfo& resume_info(const std::string& load_dir) {
  static std::mutex mutex;
  static std::map<std::string, MegatronResumeInfo> cache;
  const std::string key = fs::absolute(load_dir).lexically_normal().string();
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  MegatronResumeInfo info;
  info.where = find_megatron_iteration(load_dir, -1);
  info.dist = megatron_checkpoint_format(info.where) == "torch_dist";
  info.args = info.dist ? open_megatron_dist(load_dir, -1).args : open_megatron_legacy(load_dir, -1).args;
  info.config = info.args.config;
  // Megatron's MTP module's layer takes the last decoder layer's spec (a MoE layer's experts); the args'
  // moe_layer_freq lists the decoder's layers alone, Tessera's config one entry per layer and MTP module.
  model::MoeConfig& moe = info.config.moe;
  if (moe.enabled() && static_cast<int64_t>(moe.layer_experts.size()) == info.config.num_layers)
    for (int64_t k = 0; k < info.config.mtp_num_layers; ++k) moe.layer_experts.push_back(moe.layer_experts.back());
  std::vector<std::string> notes = info.args.notes;
  resolve_megatron_vocab_size(info.args, info.config, notes);
  const MegatronArgs& a = info.args;
  info.record = {{"model", model::to_json(info.config)},
                 {"tokenizer_type", a.tokenizer_type},
                 {"vocab_file", a.vocab_file},
                 {"merge_file", a.merge_file},
                 {"tokenizer_model", a.tokenizer_model},
                 {"make_vocab_size_divisible_by", a.make_vocab_size_divisible_by},
                 {"bf16", a.bf16},
                 {"fp16", a.fp16},
                 {"tensor_model_parallel_size", a.tensor_parallel},
                 {"pipeline_model_parallel_size", a.pipeline_parallel},
                 {"converted_from", {{"format", info.dist ? "megatron torch_dist" : "megatron torch (legacy)"},
                                     {"load_dir", key},
                                     {"notes", notes}}}};
  if (a.seed >= 0) info.record["seed"] = a.seed;
  return cache.emplace(key, std::move(info)).first->second;
}

// Copies this rank's part of `name` (spec) out of the whole tensor; a vocabulary padded otherwise keeps the
// rows both paddings have (the rest keep their values), as checkpoint.cc's reader does.
void copy_rank_part(const std::string& load_dir, const std::string& name, const Tensor& whole,
                    const model::ParameterSpec& spec, const Tensor& dst) {
  if (dst.device() != Device::cpu()) {
    const Tensor host = kernels::to_device(dst, Device::cpu());
    copy_rank_part(load_dir, name, whole, spec, host);
    kernels::transfer(dst, host);
    return;
  }
  const Shape global = spec.global_shape();
  const model::Sharding& sh = spec.sharding;
  Box wanted = sh.sharded() ? Box{sh.global_view, sh.dim, sh.offset, sh.offset + sh.length} : Box::whole(global);
  Box saved = Box::whole(whole.shape());
  int64_t limit = -1;
  if (whole.shape() != global) {
    const bool rows = spec.vocab_rows && whole.shape().size() == 2 && global.size() == 2 &&
                      whole.shape()[1] == global[1] && (wanted.is_whole() || wanted.dim == 0);
    TESSERA_CHECK(rows, "--load ", load_dir, ": the Megatron checkpoint's ", name, " is ", shape_str(whole.shape()),
                  " whole, the model expects ", shape_str(global));
    wanted = {global, 0, wanted.begin, wanted.end};
    saved = {global, 0, 0, whole.shape()[0]};
    limit = std::min(whole.shape()[0], global[0]);
  }
  const float* src = whole.host_f32();
  float* out = dst.host_f32();
  for (const CopyRun& r : plan_copy(saved, wanted, limit)) std::copy(src + r.src, src + r.src + r.count, out + r.dst);
}

}  // namespace

void resolve_megatron_vocab_size(const MegatronArgs& a, model::ModelConfig& c, std::vector<std::string>& notes) {
  if (a.tokenizer_type.empty() || a.tokenizer_type == "NullTokenizer") return;
  try {
    const std::unique_ptr<data::Tokenizer> tok =
        data::build_tokenizer({a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model, 0});
    if (tok->vocab_size() <= c.padded_vocab_size) c.vocab_size = tok->vocab_size();
  } catch (const Error& e) {
    notes.push_back(str_cat("the checkpoint's tokenizer (", a.tokenizer_type, ") could not be read here (", e.what(),
                            "); the vocabulary is taken as its padded size ", c.padded_vocab_size));
  }
}

bool is_megatron_checkpoint(const std::string& load_dir) {
  std::error_code ec;
  const fs::path dir(load_dir);
  const std::string sub = tracked_iteration_dir(dir);
  if (sub.empty()) return false;
  const fs::path iter = dir / sub;
  if (!fs::is_directory(iter, ec) || fs::exists(iter / kIndexFile, ec)) return false;
  if (fs::exists(iter / "metadata.json", ec) || fs::exists(iter / ".metadata", ec)) return true;
  for (const fs::directory_entry& e : fs::directory_iterator(iter, ec))
    if (e.path().filename().string().rfind("mp_rank_", 0) == 0) return true;
  return false;
}

int64_t megatron_checkpoint_iteration(const std::string& load_dir) {
  return find_megatron_iteration(load_dir, -1).iteration;
}

nlohmann::json megatron_checkpoint_args(const std::string& load_dir) { return resume_info(load_dir).record; }

std::vector<std::string> megatron_checkpoint_tensor_names(const std::string& load_dir) {
  model::ParameterSet declared;
  model::build_model_chunk(resume_info(load_dir).config, declared);  // declares the shapes, allocates nothing
  std::vector<std::string> names;
  for (const model::Parameter& p : declared.params()) names.push_back(p.spec.name);
  return names;
}

std::map<std::string, std::string> megatron_checkpoint_tokenizer_files(const std::string& load_dir) {
  const MegatronArgs& a = resume_info(load_dir).args;
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& [key, path] : {std::pair{"vocab_file", a.vocab_file}, std::pair{"merge_file", a.merge_file},
                                  std::pair{"tokenizer_model", a.tokenizer_model}})
    if (!path.empty() && fs::is_regular_file(path, ec)) out[key] = path;
  return out;
}

TrainingState load_megatron_checkpoint(const std::string& load_dir, model::ParameterSet& params,
                                       optim::AdamWOptimizer* optimizer) {
  const MegatronResumeInfo& info = resume_info(load_dir);
  const bool moments = optimizer != nullptr;
  int64_t iteration = 0;
  MegatronTensors read;
  if (info.dist) {
    const MegatronDistCheckpoint ck = open_megatron_dist(load_dir, -1);
    iteration = ck.iteration;
    read = read_megatron_dist(ck, info.config, moments);
  } else {
    MegatronLegacyCheckpoint ck = open_megatron_legacy(load_dir, -1);
    iteration = ck.iteration;
    read = read_megatron_legacy(std::move(ck), info.config, moments);
  }
  std::map<std::string, Tensor> model(read.model.begin(), read.model.end());
  std::map<std::string, Tensor> exp_avg(read.exp_avg.begin(), read.exp_avg.end());
  std::map<std::string, Tensor> exp_avg_sq(read.exp_avg_sq.begin(), read.exp_avg_sq.end());
  for (model::Parameter& p : params.params()) {
    const auto it = model.find(p.spec.name);
    TESSERA_CHECK(it != model.end(), "--load ", load_dir, ": the Megatron checkpoint has no tensor for ", p.spec.name,
                  ", which this model has");
    copy_rank_part(load_dir, p.spec.name, it->second, p.spec, p.value);
    if (!optimizer) continue;
    const int64_t n = p.value.numel();
    if (!p.spec.trained()) {  // the expert bias: a buffer outside Megatron's optimizer, which Adam skips here too
      optimizer->exp_avg().flat_range(p.offset, n).fill_(0.0f);
      optimizer->exp_avg_sq().flat_range(p.offset, n).fill_(0.0f);
      continue;
    }
    copy_rank_part(load_dir, p.spec.name, exp_avg.at(p.spec.name), p.spec,
                   optimizer->exp_avg().flat_range(p.offset, n).view(p.spec.shape));
    copy_rank_part(load_dir, p.spec.name, exp_avg_sq.at(p.spec.name), p.spec,
                   optimizer->exp_avg_sq().flat_range(p.offset, n).view(p.spec.shape));
  }
  // Megatron counts the steps taken; without a record, one per iteration.
  if (optimizer) optimizer->set_steps(read.optimizer_steps >= 0 ? read.optimizer_steps : iteration);

  const MegatronArgs& a = info.args;
  TrainingState state;
  state.iteration = iteration;
  state.consumed_train_samples = std::max<int64_t>(0, a.consumed_train_samples);
  state.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : 1234;  // Megatron's default --seed
  state.args = info.record;
  state.tokenizer_files = megatron_checkpoint_tokenizer_files(load_dir);
  return state;
}

}  // namespace tessera::ckpt
