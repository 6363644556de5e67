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
#include <sstream>
#include <unistd.h>

#include "ckpt/checkpoint_index.h"
#include "ckpt/checkpoint_tokenizer.h"
#include "ckpt/crc32c.h"
#include "ckpt/megatron_resume.h"
#include "ckpt/reshard.h"
#include "ckpt/safetensors.h"
#include "kernels/tensor_ops.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kTracker = kTrackerFile;
constexpr const char* kIndex = kIndexFile;

std::string read_text_file(const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), what, " ", path.string(), " is missing or unreadable");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
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
  // A Megatron-LM checkpoint has the same tracker and iteration directories but no index: say what it is.
  std::error_code ec;
  if (!fs::exists(path, ec) && fs::is_directory(*dir, ec)) {
    const bool dist = fs::exists(*dir / "metadata.json", ec) || fs::exists(*dir / ".metadata", ec);
    bool legacy = false;
    for (const fs::directory_entry& e : fs::directory_iterator(*dir, ec))
      legacy = legacy || e.path().filename().string().rfind("mp_rank_", 0) == 0;
    TESSERA_CHECK(!dist && !legacy, load_dir, " is a Megatron-LM checkpoint (", dist ? "torch_dist" : "legacy torch",
                  " format, ", dir->string(), "), not a Tessera one: tessera train --load takes it as it is; for the "
                  "rest convert it first with tessera convert --loader megatron --load-dir ", load_dir,
                  " --save-dir DIR, then --load DIR (docs/checkpoints.md)");
  }
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

void prepare_save_directory(const std::string& save_dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  if (!ec && !fs::is_directory(save_dir, ec)) ec = std::make_error_code(std::errc::not_a_directory);
  if (ec) throw Error(str_cat(flag, "=", save_dir, ": cannot create the checkpoint directory: ", ec.message()));
  if (::access(save_dir.c_str(), W_OK | X_OK) != 0)
    throw Error(str_cat(flag, "=", save_dir, ": cannot write checkpoints there: ", std::strerror(errno)));
}

int64_t latest_checkpointed_iteration(const std::string& load_dir) {
  if (is_megatron_checkpoint(load_dir)) return megatron_checkpoint_iteration(load_dir);
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
  if (is_megatron_checkpoint(load_dir)) return megatron_checkpoint_tokenizer_files(load_dir);
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  const CheckpointIndex index = read_index(load_dir, iteration, &dir);
  return carried_tokenizer_files(dir.string(), index);
}

std::vector<std::string> latest_model_tensor_names(const std::string& load_dir) {
  if (is_megatron_checkpoint(load_dir)) return megatron_checkpoint_tensor_names(load_dir);
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  std::vector<std::string> names;
  for (const auto& [name, saved] : read_index(load_dir, iteration, &dir).tensors)
    if (name.rfind("optimizer.", 0) != 0) names.push_back(name);
  return names;
}

nlohmann::json latest_checkpoint_args(const std::string& load_dir) {
  if (is_megatron_checkpoint(load_dir)) return megatron_checkpoint_args(load_dir);
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir;
  return read_index(load_dir, iteration, &dir).args;
}

TrainingState load_checkpoint(const std::string& load_dir, model::ParameterSet& params,
                              optim::AdamWOptimizer* optimizer) {
  if (is_megatron_checkpoint(load_dir)) return load_megatron_checkpoint(load_dir, params, optimizer);
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
