#include "ckpt/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "ckpt/checkpoint_index.h"
#include "ckpt/checkpoint_tokenizer.h"
#include "ckpt/crc32c.h"
#include "ckpt/reshard.h"
#include "ckpt/safetensors.h"
#include "kernels/tensor_ops.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";
constexpr const char* kIndex = "index.json";

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

// Writes a small text file atomically: temporary file, fsync, rename.
void write_file_atomically(const fs::path& path, const std::string& contents) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    TESSERA_CHECK(f != nullptr, "cannot write ", tmp.string());
    bool ok = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
    ok = std::fflush(f) == 0 && ok;
    ok = ::fsync(fileno(f)) == 0 && ok;
    ok = std::fclose(f) == 0 && ok;
    TESSERA_CHECK(ok, "failed writing ", tmp.string());
  }
  fs::rename(tmp, path);
}

std::string read_text_file(const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), what, " ", path.string(), " is missing or unreadable");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
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

// The part of the full tensor this rank holds.
Box wanted_box(const model::ParameterSpec& spec) {
  const model::Sharding& s = spec.sharding;
  if (!s.sharded()) return Box::whole(spec.shape);
  return {s.global_view, s.dim, s.offset, s.offset + s.length};
}

// The files of one checkpoint directory, opened on first use and checked against the index.
class CheckpointReader {
 public:
  CheckpointReader(fs::path dir, const CheckpointIndex& index, std::string index_path)
      : dir_(std::move(dir)), index_(index), index_path_(std::move(index_path)) {}

  const SafetensorsFile& file(const std::string& name) {
    auto it = open_.find(name);
    if (it != open_.end()) return it->second;
    const fs::path p = dir_ / name;
    const SavedFile& f = index_.files.at(name);
    TESSERA_CHECK(fs::exists(p), "checkpoint file ", p.string(), " is missing");
    TESSERA_CHECK(fs::file_size(p) == f.bytes, "checkpoint file ", p.string(), " has ", fs::file_size(p),
                  " bytes, the index ", index_path_, " says ", f.bytes, " (truncated or overwritten)");
    SafetensorsFile opened = SafetensorsFile::open(p.string());
    if (f.crc32c) {
      uint32_t crc = crc32c_file(p.string());
      if (crc != *f.crc32c)
        throw Error(str_cat("checkpoint file ", p.string(), " is corrupt: its checksum is ", crc32c_str(crc),
                            ", the index says ", crc32c_str(*f.crc32c), "; ", damaged_tensors(name, opened)));
    }
    return open_.emplace(name, std::move(opened)).first->second;
  }

  // Which tensors of a file whose checksum is wrong fail their own checksums.
  std::string damaged_tensors(const std::string& file, const SafetensorsFile& f) {
    std::vector<std::string> bad;
    for (const auto& [tensor, saved] : index_.tensors)
      for (const SavedSlice& s : saved.slices) {
        if (s.file != file || !s.crc32c || !f.contains(s.key)) continue;
        Tensor t = f.read(s.key);
        if (crc32c(t.host_raw(), t.nbytes()) != *s.crc32c) bad.push_back(s.key);
      }
    if (bad.empty()) return "its tensors' own checksums hold, so the damage is in the header";
    std::string out = "damaged tensor(s):";
    for (const std::string& b : bad) out += " " + b;
    return out;
  }

  // Reads a saved slice whole, checking its shape and checksum.
  void read_slice(const std::string& tensor, const SavedSlice& s, const Tensor& dst) {
    const SafetensorsFile& f = file(s.file);
    TESSERA_CHECK(f.contains(s.key), "checkpoint file ", f.path(), " has no tensor ", s.key, " (of ", tensor,
                  ") that the index lists");
    f.read_into(s.key, dst);
    if (s.crc32c) {
      uint32_t crc = crc32c(dst.host_raw(), dst.nbytes());
      TESSERA_CHECK(crc == *s.crc32c, "checkpoint file ", f.path(), ": tensor ", s.key, " is corrupt: its checksum is ",
                    crc32c_str(crc), ", the index says ", crc32c_str(*s.crc32c));
    }
  }

  // Reads the box of `parts` (one saved slice, or the pieces a box was saved in) into dst, the box's
  // storage as a flat tensor, checking that the pieces cover it exactly.
  void read_box(const std::string& tensor, const std::vector<const SavedSlice*>& parts, const Tensor& dst) {
    if (!parts[0]->piece) return read_slice(tensor, *parts[0], dst.view(parts[0]->shape));
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const SavedSlice* s : parts) {
      read_slice(tensor, *s, dst.flat_range(s->piece->first, s->piece->second - s->piece->first));
      ranges.push_back(*s->piece);
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t next = 0;
    for (const auto& [begin, end] : ranges) next = begin == next ? end : -1;
    TESSERA_CHECK(next == dst.numel(), "checkpoint ", index_path_, ": the saved pieces of a slice of ", tensor,
                  " do not cover its ", dst.numel(), " elements exactly once (pieces missing or overlapping)");
  }

  // Fills dst, this rank's part of `name` described by spec, from the saved slices that overlap it. A
  // tensor on a GPU (a model trained there) is read into a host copy of it, which keeps its values where
  // the checkpoint has none (vocabulary rows), and moved there once: the format is the same either way.
  void load(const std::string& name, const model::ParameterSpec& spec, const Tensor& dst) {
    if (dst.device() == Device::cpu()) return load_on_host(name, spec, dst);
    const Tensor host = kernels::to_device(dst, Device::cpu());
    load_on_host(name, spec, host);
    kernels::transfer(dst, host);
  }

  void load_on_host(const std::string& name, const model::ParameterSpec& spec, const Tensor& dst) {
    auto it = index_.tensors.find(name);
    TESSERA_CHECK(it != index_.tensors.end(), "checkpoint ", index_path_, " has no tensor ", name);
    const SavedTensor& saved = it->second;
    const Shape global = spec.global_shape();
    Box wanted = wanted_box(spec);
    int64_t limit = -1, expected = wanted.numel();
    bool relabel = false;
    if (saved.global_shape != global) {
      // A vocabulary padded differently: copy the rows both have; the others keep their initial values.
      bool ok = spec.vocab_rows && saved.global_shape.size() == 2 && global.size() == 2 &&
                saved.global_shape[1] == global[1] && (wanted.is_whole() || wanted.dim == 0);
      TESSERA_CHECK(ok, "checkpoint tensor ", name, " in ", index_path_, " has shape ", shape_str(saved.global_shape),
                    ", the model expects ", shape_str(global));
      wanted = {global, 0, wanted.begin, wanted.end};
      limit = std::min(saved.global_shape[0], global[0]);
      expected = std::max<int64_t>(0, std::min(wanted.end, limit) - wanted.begin) * global[1];
      relabel = true;
    }
    // The saved boxes: a slice, or the pieces one slice was saved in (by several data-parallel ranks).
    std::vector<std::vector<const SavedSlice*>> boxes;
    for (const SavedSlice& s : saved.slices) {
      auto same = std::find_if(boxes.begin(), boxes.end(),
                               [&](const auto& b) { return s.piece && b[0]->piece && b[0]->box == s.box; });
      if (same != boxes.end())
        same->push_back(&s);
      else
        boxes.push_back({&s});
    }
    // The common case, the same layout: one box is exactly this rank's part.
    if (!relabel)
      for (const auto& parts : boxes)
        if (parts[0]->box == wanted || (parts[0]->box.is_whole() && wanted.is_whole()))
          return read_box(name, parts, dst.view({wanted.numel()}));

    int64_t copied = 0;
    for (const auto& parts : boxes) {
      const SavedSlice& s = *parts[0];
      Box box = s.box;
      if (relabel) {
        TESSERA_CHECK(box.is_whole() || box.dim == 0, "checkpoint ", index_path_, ": a slice of ", name,
                      " is not split by vocabulary rows");
        box = {global, 0, box.begin, box.end};  // rows keep their flat offsets whatever the padding
      }
      std::vector<CopyRun> runs = plan_copy(box, wanted, limit);
      if (runs.empty()) continue;
      Tensor buf = Tensor::empty({s.box.numel()}, DType::F32, Device::cpu());
      read_box(name, parts, buf);
      const float* src = buf.host_f32();
      float* out = dst.host_f32();
      for (const CopyRun& r : runs) std::copy(src + r.src, src + r.src + r.count, out + r.dst);
      copied += copied_elements(runs);
    }
    TESSERA_CHECK(copied == expected, "checkpoint ", index_path_, ": the saved slices of ", name, " cover ", copied,
                  " of the ", expected, " elements this rank needs (slices missing or overlapping)");
  }

 private:
  fs::path dir_;
  const CheckpointIndex& index_;
  std::string index_path_;
  std::map<std::string, SafetensorsFile> open_;
};

CheckpointIndex read_index(const std::string& load_dir, int64_t iteration, fs::path* dir) {
  *dir = fs::path(load_dir) / iteration_dir_name(iteration);
  fs::path path = *dir / kIndex;
  CheckpointIndex index = parse_checkpoint_index(read_text_file(path, "checkpoint index"), path.string());
  TESSERA_CHECK(index.iteration == iteration, "checkpoint index ", path.string(), " is for iteration ",
                index.iteration, ", the tracker says ", iteration);
  return index;
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

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
    write_file_atomically(tmp_dir / fragment_file(world_rank), json{{"files", files}, {"tensors", tensors}}.dump());
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
      json fragment = json::parse(read_text_file(tmp_dir / name, "checkpoint index fragment"));
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
    write_file_atomically(tmp_dir / kIndex, index.dump(1));

    // Swap the complete directory into place, then point the tracker at it.
    fs::path old_dir = root / (iteration_dir_name(state_.iteration) + ".old");
    fs::remove_all(old_dir);
    if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
    fs::rename(tmp_dir, final_dir);
    fs::remove_all(old_dir);
    write_file_atomically(root / kTracker, std::to_string(state_.iteration) + "\n");
    prune_checkpoints(root.string(), keep_last_);
  }
  barrier();
}

void prune_checkpoints(const std::string& root, int64_t keep_last) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  const std::regex leftover(R"(iter_\d{7}\.(tmp|old))");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, leftover)) fs::remove_all(entry.path(), ec);
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

SafetensorsFile open_extra_file(const std::string& load_dir, const std::string& name) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  const CheckpointIndex index = read_index(load_dir, iteration, &dir);
  TESSERA_CHECK(index.files.count(name), "checkpoint ", dir.string(), " has no file ", name,
                " (saved by another run or layout)");
  CheckpointReader reader(dir, index, (dir / kIndex).string());
  return reader.file(name);
}

bool checkpoint_complete(const std::string& dir, int64_t iteration) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / iteration_dir_name(iteration) / kIndex, ec);
}

void roll_back_checkpoints(const std::string& dir, int64_t iteration) {
  TESSERA_CHECK(checkpoint_complete(dir, iteration), "cannot roll ", dir, " back to iteration ", iteration,
                ": it holds no complete checkpoint of it");
  write_file_atomically(fs::path(dir) / kTracker, std::to_string(iteration) + "\n");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.size() != 12 || name.rfind("iter_", 0) != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    if (std::stoll(name.substr(5)) > iteration) fs::remove_all(entry.path());
  }
}

void prepare_save_directory(const std::string& save_dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  if (!ec && !fs::is_directory(save_dir, ec)) ec = std::make_error_code(std::errc::not_a_directory);
  if (ec) throw Error(str_cat(flag, "=", save_dir, ": cannot create the checkpoint directory: ", ec.message()));
  if (::access(save_dir.c_str(), W_OK | X_OK) != 0)
    throw Error(str_cat(flag, "=", save_dir, ": cannot write checkpoints there: ", std::strerror(errno)));
}

int64_t latest_checkpointed_iteration(const std::string& load_dir) {
  fs::path tracker = fs::path(load_dir) / kTracker;
  if (!fs::exists(tracker)) return -1;
  std::ifstream in(tracker);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // Megatron reads int(f.read().strip()), so a tracker written by hand with blanks or a CRLF still loads.
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && blank(text.back())) text.pop_back();
  text.erase(0, std::find_if_not(text.begin(), text.end(), blank) - text.begin());
  try {
    size_t used = 0;
    long long it = std::stoll(text, &used);
    TESSERA_CHECK(used == text.size() && it >= 0, "bad");
    return it;
  } catch (const std::exception&) {
    throw Error(str_cat("checkpoint tracker ", tracker.string(), " does not hold an iteration number: '", text, "'"));
  }
}

std::map<std::string, std::string> latest_tokenizer_files(const std::string& load_dir) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  const CheckpointIndex index = read_index(load_dir, iteration, &dir);
  return carried_tokenizer_files(dir.string(), index);
}

std::vector<std::string> latest_model_tensor_names(const std::string& load_dir) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  std::vector<std::string> names;
  for (const auto& [name, saved] : read_index(load_dir, iteration, &dir).tensors)
    if (name.rfind("optimizer.", 0) != 0) names.push_back(name);
  return names;
}

nlohmann::json latest_checkpoint_args(const std::string& load_dir) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  return read_index(load_dir, iteration, &dir).args;
}

TrainingState load_checkpoint(const std::string& load_dir, model::ParameterSet& params,
                              optim::AdamWOptimizer* optimizer) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  const CheckpointIndex index = read_index(load_dir, iteration, &dir);
  // Only the files read are needed: a checkpoint whose optimizer files were removed (weights kept for
  // deployment) still loads its weights. A file the weights need is checked when the reader opens it.
  if (optimizer)
    for (const auto& [name, f] : index.files)
      TESSERA_CHECK(name.rfind("optim.", 0) != 0 || fs::exists(dir / name), "checkpoint file ", (dir / name).string(),
                    " is missing (the optimizer state; --no-load-optim or --finetune loads the weights alone)");

  TrainingState state{index.iteration, index.consumed_train_samples, index.skipped_iterations, index.seed, index.args,
                      index.loss_scaler, index.skipped_train_samples, carried_tokenizer_files(dir.string(), index)};
  CheckpointReader reader(dir, index, (dir / kIndex).string());
  for (model::Parameter& p : params.params()) reader.load(p.spec.name, p.spec, p.value);
  if (optimizer) {
    TESSERA_CHECK(index.has_optimizer, "checkpoint ", dir.string(),
                  " holds no optimizer state (use --no-load-optim or --finetune)");
    for (model::Parameter& p : params.params()) {
      int64_t n = p.value.numel();
      reader.load("optimizer.exp_avg." + p.spec.name, p.spec, optimizer->exp_avg().flat_range(p.offset, n).view(p.spec.shape));
      reader.load("optimizer.exp_avg_sq." + p.spec.name, p.spec,
                  optimizer->exp_avg_sq().flat_range(p.offset, n).view(p.spec.shape));
    }
    optimizer->set_steps(index.optimizer_steps);
  }
  return state;
}

std::vector<std::pair<std::string, Tensor>> load_full_model(const std::string& load_dir, TrainingState* state) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  const CheckpointIndex index = read_index(load_dir, iteration, &dir);
  if (state)
    *state = {index.iteration, index.consumed_train_samples, index.skipped_iterations, index.seed, index.args,
              index.loss_scaler, index.skipped_train_samples, carried_tokenizer_files(dir.string(), index)};
  CheckpointReader reader(dir, index, (dir / kIndex).string());
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, saved] : index.tensors) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    model::ParameterSpec spec{name, saved.global_shape};
    Tensor t = Tensor::empty(saved.global_shape, DType::F32, Device::cpu());
    reader.load(name, spec, t);
    out.emplace_back(name, t);
  }
  return out;
}

void save_full_model(const std::string& save_dir, const TrainingState& state,
                     const std::vector<std::pair<std::string, Tensor>>& tensors) {
  model::ParameterSet params;
  for (const auto& [name, t] : tensors) params.add({name, t.shape(), model::Init::Zeros});
  params.allocate(0);
  for (const auto& [name, t] : tensors) std::copy(t.host_f32(), t.host_f32() + t.numel(), params.get(name).value.host_f32());
  save_checkpoint(save_dir, state, params, nullptr);
}

}  // namespace tessera::ckpt
