// Saving a checkpoint (ckpt/checkpoint.h): CheckpointSave's three steps, save_checkpoint, pruning. Each
// rank's files and index fragment go into iter_N.tmp; the leader merges the fragments into the index,
// written last, renames the directory into place and only then moves the tracker.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_index.h"
#include "ckpt/checkpoint_tokenizer.h"
#include "ckpt/crc32c.h"
#include "ckpt/safetensors.h"
#include "core/file_io.h"
#include "kernels/tensor_ops.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string two_digits(int r) { return str_cat(r < 10 ? "0" : "", r); }
std::string three_digits(int r) { return str_cat(r < 10 ? "00" : r < 100 ? "0" : "", r); }

// Where one kind of parameter (dense or expert) goes: its files, and this rank's tensor and data rank
// in that kind's layout (dense: tp, dp; expert: etp, edp).
struct Destination {
  std::string model_file, optim_file;
  int tensor_rank, data_rank;
};
Destination dense_destination(const ShardPlacement& p) {
  const std::string at = str_cat("tp", two_digits(p.tensor_rank), ".pp", two_digits(p.pipeline_rank));
  return {str_cat("model.", at, ".safetensors"),
          str_cat("optim.", at, ".dp", three_digits(p.data_rank), ".safetensors"), p.tensor_rank, p.data_rank};
}
// Expert files are named by the expert coordinates: expert rank ZZZ of expert tensor rank XX, stage YY
// holds the experts it owns, which no dense file name can tell apart.
Destination expert_destination(const ShardPlacement& p) {
  const std::string at = str_cat("etp", two_digits(p.expert_tensor_rank), ".pp", two_digits(p.pipeline_rank), ".ep",
                                 three_digits(p.expert_rank));
  return {str_cat("model.", at, ".safetensors"),
          str_cat("optim.", at, ".edp", three_digits(p.expert_data_rank), ".safetensors"), p.expert_tensor_rank,
          p.expert_data_rank};
}
bool is_expert(const model::ParameterSpec& spec) {
  return spec.grad_reduce == model::ParameterSpec::GradReduce::ExpertDataParallel;
}
// One per writing rank (a world rank writes dense and expert files under different coordinates).
std::string fragment_file(int world_rank) { return str_cat("index.rank", world_rank, ".json"); }
bool is_fragment_file(const std::string& name) {
  return name.rfind("index.rank", 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
}

// Which part of a tensor a file holds: the parameter's sharding (dim -1: all of it). `value` is what
// is stored: the parameter's shard, or a piece of it (then the caller adds the "piece" range); its
// CRC-32C is added when it is written (CheckpointSave::write).
json slice_entry(const std::string& file, const std::string& key, const model::ParameterSpec& spec,
                 const Tensor& value) {
  const model::Sharding& s = spec.sharding;
  return {{"file", file},
          {"key", key},
          {"shape", value.shape()},
          {"dtype", "fp32"},
          {"view", s.sharded() ? s.global_view : spec.shape},
          {"dim", s.dim},
          {"offset", s.offset},
          {"length", s.length}};  // and "crc32c", of the value, added when the file is written
}

std::string read_fragment(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "checkpoint index fragment ", path.string(), " is missing or unreadable");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

CheckpointSave::CheckpointSave(std::string save_dir, const TrainingState& state, const model::ParameterSet& params,
                               const optim::Optimizer* optimizer, const ShardPlacement& placement, int64_t keep_last,
                               const std::vector<ExtraFile>& extra, bool own_copies)
    : save_dir_(std::move(save_dir)),
      state_(state),
      placement_(placement),
      keep_last_(keep_last),
      leader_(placement.world == nullptr || placement.world->rank() == 0),
      optimizer_steps_(optimizer ? optimizer->steps() : 0),
      has_optimizer_(optimizer != nullptr) {
  const fs::path root(save_dir_);
  const fs::path tmp_dir = root / (iteration_dir_name(state.iteration) + ".tmp");
  if (leader_) {
    fs::create_directories(root);
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  }
  if (placement.world) placement.world->barrier();

  // Data-parallel rank 0 of every (tensor, pipeline) group writes its dense parameter shards and, with
  // AdamW, their moments; expert-data-parallel rank 0 of every (expert tensor, expert, pipeline) group
  // the same of its expert parameters, into expert files. With the distributed optimizer every rank
  // writes the moment pieces it owns of both kinds. Each writer adds an index fragment. A rank-local
  // checkpoint (every_tensor) has everything this rank holds.
  const optim::MomentShard moments = optimizer ? optimizer->moments() : optim::MomentShard{};
  const Destination dense = dense_destination(placement), expert = expert_destination(placement);
  auto destination = [&](const model::Parameter& p) -> const Destination& {
    return is_expert(p.spec) ? expert : dense;
  };
  // The first stage writes the tied embedding; a parameter replicated over its tensor group (the expert
  // tensor group for an expert parameter) is the same on every rank of it: its rank 0 writes it.
  auto writes = [&](const model::Parameter& p) {
    return placement.every_tensor ||
           (!p.spec.tied_copy && (p.spec.sharding.sharded() || destination(p).tensor_rank == 0));
  };
  const bool first_data_rank_only = !placement.every_tensor;
  std::map<std::string, std::vector<std::pair<std::string, Tensor>>> model_files, optim_files;
  // What is written is read on the host: tensors on a GPU are staged there (on the CPU these are the
  // tensors themselves, or with own_copies copies of them), so a checkpoint saved from a GPU is the same
  // files as one saved on the CPU.
  auto on_host = [own_copies](const Tensor& t) {
    if (t.device() != Device::cpu()) return kernels::to_device(t, Device::cpu());
    return own_copies ? t.clone() : t;
  };
  auto add_slice = [&](const std::string& tensor, const model::ParameterSpec& spec, json entry, const Tensor& value) {
    slices_.push_back({tensor, spec.global_shape(), std::move(entry), value});
  };
  for (const model::Parameter& p : params.params()) {
    const Destination& d = destination(p);
    if (!writes(p) || (first_data_rank_only && d.data_rank != 0)) continue;
    const Tensor value = on_host(p.value);
    model_files[d.model_file].emplace_back(p.spec.name, value);
    add_slice(p.spec.name, p.spec, slice_entry(d.model_file, p.spec.name, p.spec, value), value);
  }
  for (const optim::MomentPiece& piece : moments.pieces) {
    const model::Parameter& p = *piece.param;
    const Destination& d = destination(p);
    // AdamW's whole moments, like a distributed optimizer's piece that every rank of its data group
    // holds, are written by that group's rank 0.
    if (!writes(p) ||
        (first_data_rank_only && (!moments.sharded || piece.on_every_data_rank) && d.data_rank != 0))
      continue;
    const bool whole = piece.begin == 0 && piece.length == p.value.numel();
    for (const auto& [moment, buffer] : {std::pair{"exp_avg", &moments.exp_avg},
                                         std::pair{"exp_avg_sq", &moments.exp_avg_sq}}) {
      const std::string tensor = str_cat("optimizer.", moment, ".", p.spec.name);
      Tensor t = on_host(buffer->flat_range(piece.state, piece.length));
      if (whole) t = t.view(p.spec.shape);
      const std::string key = whole ? tensor : str_cat(tensor, "[", piece.begin, ":", piece.begin + piece.length, "]");
      json entry = slice_entry(d.optim_file, key, p.spec, t);
      if (!whole) entry["piece"] = {piece.begin, piece.begin + piece.length};
      optim_files[d.optim_file].emplace_back(key, t);
      add_slice(tensor, p.spec, std::move(entry), t);
    }
  }
  for (auto& [name, ts] : model_files) files_.push_back({name, std::move(ts), {}});
  model_files_ = files_.size();
  for (auto& [name, ts] : optim_files) files_.push_back({name, std::move(ts), {}});
  for (const ExtraFile& e : extra) {
    TESSERA_CHECK(std::none_of(files_.begin(), files_.end(), [&](const File& f) { return f.name == e.name; }),
                  "checkpoint: extra file ", e.name, " written twice");
    File f{e.name, {}, e.metadata};
    for (const auto& [key, t] : e.tensors) f.tensors.emplace_back(key, on_host(t));
    files_.push_back(std::move(f));
  }
}

int64_t CheckpointSave::tensor_bytes() const {
  int64_t bytes = 0;
  for (const File& f : files_)
    for (const auto& [key, t] : f.tensors) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

void CheckpointSave::write(const std::function<void(const std::string&)>& after_file) {
  TESSERA_CHECK(!written_, "checkpoint of iteration ", state_.iteration, " written twice");
  written_ = true;
  const fs::path tmp_dir = fs::path(save_dir_) / (iteration_dir_name(state_.iteration) + ".tmp");
  if (!files_.empty()) {
    // The test hook: a crash after the model files, before the optimizer's and the index.
    auto crash_hook = [] {
      if (const char* crash = std::getenv("TESSERA_CKPT_CRASH_DURING_SAVE"); crash && std::string(crash) == "1") {
        std::fprintf(stderr, "TESSERA_CKPT_CRASH_DURING_SAVE: aborting mid-save\n");
        std::abort();
      }
    };
    if (model_files_ == 0) crash_hook();
    json files = json::object(), tensors = json::object();
    for (size_t i = 0; i < files_.size(); ++i) {
      const File& f = files_[i];
      const fs::path path = tmp_dir / f.name;
      const uint32_t crc = write_safetensors(path.string(), f.tensors, f.metadata);
      files[f.name] = {{"bytes", fs::file_size(path)}, {"crc32c", crc32c_str(crc)}};
      if (after_file) after_file(path.string());
      if (i + 1 == model_files_) crash_hook();
    }
    for (Slice& s : slices_) {
      s.entry["crc32c"] = crc32c_str(crc32c(s.value.host_raw(), s.value.nbytes()));
      json& entry = tensors[s.tensor];
      entry["global_shape"] = s.global_shape;
      entry["slices"].push_back(s.entry);
    }
    const int world_rank = placement_.world ? placement_.world->rank() : 0;
    write_file_atomically((tmp_dir / fragment_file(world_rank)).string(),
                          json{{"files", files}, {"tensors", tensors}}.dump());
  }
  if (leader_ && !state_.tokenizer_files.empty())
    tokenizer_files_ = copy_tokenizer_files(tmp_dir.string(), state_.tokenizer_files);
}

void CheckpointSave::finalize() {
  TESSERA_CHECK(written_, "checkpoint of iteration ", state_.iteration, " finalised before it was written");
  const fs::path root(save_dir_);
  const fs::path final_dir = root / iteration_dir_name(state_.iteration);
  const fs::path tmp_dir = root / (iteration_dir_name(state_.iteration) + ".tmp");
  auto barrier = [&] {
    if (placement_.world) placement_.world->barrier();
  };
  barrier();
  if (leader_) {
    // Merge the fragments: one entry per tensor with the slices of every file that holds part of it.
    std::vector<std::string> fragments;
    for (const auto& entry : fs::directory_iterator(tmp_dir))
      if (is_fragment_file(entry.path().filename().string())) fragments.push_back(entry.path().filename().string());
    std::sort(fragments.begin(), fragments.end());
    json files = json::object(), tensors = json::object();
    for (const std::string& name : fragments) {
      json fragment = json::parse(read_fragment(tmp_dir / name));
      fs::remove(tmp_dir / name);
      files.update(fragment.at("files"));
      for (auto& [tensor, entry] : fragment.at("tensors").items()) {
        json& merged = tensors[tensor];
        merged["global_shape"] = entry.at("global_shape");
        for (json& slice : entry.at("slices")) merged["slices"].push_back(std::move(slice));
      }
    }
    json index = {{"format", "tessera-checkpoint"},
                  {"version", kCheckpointIndexVersion},
                  {"iteration", state_.iteration},
                  {"consumed_train_samples", state_.consumed_train_samples},
                  {"skipped_iterations", state_.skipped_iterations},
                  {"seed", state_.seed},
                  {"optimizer_steps", optimizer_steps_},
                  {"has_optimizer", has_optimizer_},
                  {"args", state_.args},
                  {"loss_scaler", state_.loss_scaler},
                  {"files", files},
                  {"tensors", tensors}};
    if (!state_.tokenizer_files.empty()) index["tokenizer_files"] = tokenizer_files_;
    if (state_.skipped_train_samples >= 0) index["skipped_train_samples"] = state_.skipped_train_samples;
    // The index is written last: a directory without it is incomplete.
    write_file_atomically((tmp_dir / kIndexFile).string(), index.dump(1));

    // Swap the complete directory into place, then point the tracker at it.
    fs::path old_dir = root / (iteration_dir_name(state_.iteration) + ".old");
    fs::remove_all(old_dir);
    if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
    fs::rename(tmp_dir, final_dir);
    fs::remove_all(old_dir);
    write_file_atomically((root / kTrackerFile).string(), std::to_string(state_.iteration) + "\n");
    prune_checkpoints(root.string(), keep_last_);
  }
  barrier();
}

void prune_checkpoints(const std::string& root, int64_t keep_last) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  const std::regex leftover(R"(iter_\d{7}\.(tmp|old))");
  // A tracker's temporary file (write_file_atomically's PATH.tmp.PID) is left by a kill between its
  // write and its rename; the tracker itself was just renamed into place, so none is being written.
  const std::regex tracker_leftover(std::string(kTrackerFile) + R"(\.tmp\.\d+)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, leftover)) fs::remove_all(entry.path(), ec);
    if (entry.is_regular_file() && std::regex_match(name, tracker_leftover)) fs::remove(entry.path(), ec);
    if (!entry.is_directory() || name.size() != 12 || name.rfind("iter_", 0) != 0) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    dirs.emplace_back(std::stoll(name.substr(5)), entry.path());
  }
  if (keep_last == 0) return;
  std::sort(dirs.begin(), dirs.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < dirs.size(); ++i) fs::remove_all(dirs[i].second);
}

void save_checkpoint(const std::string& save_dir, const TrainingState& state, const model::ParameterSet& params,
                     const optim::Optimizer* optimizer, const ShardPlacement& placement, int64_t keep_last,
                     const std::vector<ExtraFile>& extra) {
  CheckpointSave save(save_dir, state, params, optimizer, placement, keep_last, extra, /*own_copies=*/false);
  save.write();
  save.finalize();
}

bool checkpoint_complete(const std::string& dir, int64_t iteration) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / iteration_dir_name(iteration) / kIndexFile, ec);
}

void roll_back_checkpoints(const std::string& dir, int64_t iteration) {
  TESSERA_CHECK(checkpoint_complete(dir, iteration), "cannot roll ", dir, " back to iteration ", iteration,
                ": it holds no complete checkpoint of it");
  write_file_atomically((fs::path(dir) / kTrackerFile).string(), std::to_string(iteration) + "\n");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.size() != 12 || name.rfind("iter_", 0) != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    if (std::stoll(name.substr(5)) > iteration) fs::remove_all(entry.path());
  }
}

}  // namespace tessera::ckpt
