#include "ckpt/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "ckpt/safetensors.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";
constexpr const char* kIndex = "index.json";

std::string model_file(int tensor_rank) { return str_cat("model.tp", tensor_rank < 10 ? "0" : "", tensor_rank, ".pp00.safetensors"); }
std::string optim_file(int tensor_rank) {
  return str_cat("optim.tp", tensor_rank < 10 ? "0" : "", tensor_rank, ".pp00.dp000.safetensors");
}
std::string fragment_file(int tensor_rank) { return str_cat("index.tp", tensor_rank, ".json"); }

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

// Which part of a tensor a file holds: the parameter's sharding (dim -1: all of it).
json slice_entry(const std::string& file, const std::string& key, const model::ParameterSpec& spec) {
  const model::Sharding& s = spec.sharding;
  return {{"file", file},   {"key", key},       {"shape", spec.shape},       {"dtype", "fp32"},
          {"view", s.sharded() ? s.global_view : spec.shape}, {"dim", s.dim}, {"offset", s.offset},
          {"length", s.length}};
}

bool same_slice(const json& e, const model::ParameterSpec& spec) {
  const model::Sharding& s = spec.sharding;
  if (e.at("dim").get<int>() != s.dim) return false;
  if (!s.sharded()) return true;
  return e.at("view").get<Shape>() == s.global_view && e.at("offset").get<int64_t>() == s.offset &&
         e.at("length").get<int64_t>() == s.length;
}

json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), "checkpoint index ", path.string(), " is missing or unreadable");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(str_cat("checkpoint index ", path.string(), " is not valid JSON: ", e.what()));
  }
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

void save_checkpoint(const std::string& save_dir, const TrainingState& state, const model::ParameterSet& params,
                     const optim::AdamWOptimizer* optimizer, const ShardPlacement& placement) {
  fs::path root(save_dir);
  fs::path final_dir = root / iteration_dir_name(state.iteration);
  fs::path tmp_dir = root / (iteration_dir_name(state.iteration) + ".tmp");
  const bool leader = placement.world == nullptr || placement.world->rank() == 0;
  auto barrier = [&] {
    if (placement.world) placement.world->barrier();
  };
  if (leader) {
    fs::create_directories(root);
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  }
  barrier();

  // Every tensor rank of data-parallel rank 0 writes its shards and an index fragment describing them.
  if (placement.data_rank == 0) {
    const std::string mfile = model_file(placement.tensor_rank), ofile = optim_file(placement.tensor_rank);
    json tensors = json::object();
    std::vector<std::pair<std::string, Tensor>> model_tensors, optim_tensors;
    for (const model::Parameter& p : params.params()) {
      model_tensors.emplace_back(p.spec.name, p.value);
      tensors[p.spec.name] = {{"global_shape", p.spec.global_shape()}, {"slice", slice_entry(mfile, p.spec.name, p.spec)}};
      if (!optimizer) continue;
      int64_t n = p.value.numel();
      for (const auto& [moment, flat] : {std::pair{"exp_avg", &optimizer->exp_avg()},
                                         std::pair{"exp_avg_sq", &optimizer->exp_avg_sq()}}) {
        std::string key = str_cat("optimizer.", moment, ".", p.spec.name);
        optim_tensors.emplace_back(key, flat->flat_range(p.offset, n).view(p.spec.shape));
        tensors[key] = {{"global_shape", p.spec.global_shape()}, {"slice", slice_entry(ofile, key, p.spec)}};
      }
    }
    write_safetensors((tmp_dir / mfile).string(), model_tensors);
    json files = {{mfile, {{"bytes", fs::file_size(tmp_dir / mfile)}}}};
    if (optimizer) {
      write_safetensors((tmp_dir / ofile).string(), optim_tensors);
      files[ofile] = {{"bytes", fs::file_size(tmp_dir / ofile)}};
    }
    write_file_atomically(tmp_dir / fragment_file(placement.tensor_rank),
                          json{{"files", files}, {"tensors", tensors}}.dump());
  }
  barrier();

  if (leader) {
    // Merge the fragments: one entry per tensor with the slices of every file that holds part of it.
    json files = json::object(), tensors = json::object();
    for (int tp = 0; fs::exists(tmp_dir / fragment_file(tp)); ++tp) {
      json fragment = read_json_file(tmp_dir / fragment_file(tp));
      fs::remove(tmp_dir / fragment_file(tp));
      files.update(fragment.at("files"));
      for (auto& [name, entry] : fragment.at("tensors").items()) {
        json& merged = tensors[name];
        merged["global_shape"] = entry.at("global_shape");
        merged["slices"].push_back(entry.at("slice"));
      }
    }
    json index = {{"format", "tessera-checkpoint"},
                  {"version", 1},
                  {"iteration", state.iteration},
                  {"consumed_train_samples", state.consumed_train_samples},
                  {"skipped_iterations", state.skipped_iterations},
                  {"seed", state.seed},
                  {"optimizer_steps", optimizer ? optimizer->steps() : 0},
                  {"has_optimizer", optimizer != nullptr},
                  {"args", state.args},
                  {"files", files},
                  {"tensors", tensors}};
    // The index is written last: a directory without it is incomplete.
    write_file_atomically(tmp_dir / kIndex, index.dump(1));

    // Swap the complete directory into place, then point the tracker at it.
    fs::path old_dir = root / (iteration_dir_name(state.iteration) + ".old");
    fs::remove_all(old_dir);
    if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
    fs::rename(tmp_dir, final_dir);
    fs::remove_all(old_dir);
    write_file_atomically(root / kTracker, std::to_string(state.iteration) + "\n");
  }
  barrier();
}

int64_t latest_checkpointed_iteration(const std::string& load_dir) {
  fs::path tracker = fs::path(load_dir) / kTracker;
  if (!fs::exists(tracker)) return -1;
  std::ifstream in(tracker);
  std::string text;
  std::getline(in, text);
  try {
    size_t used = 0;
    long long it = std::stoll(text, &used);
    TESSERA_CHECK(used == text.size() && it >= 0, "bad");
    return it;
  } catch (const std::exception&) {
    throw Error(str_cat("checkpoint tracker ", tracker.string(), " does not hold an iteration number: '", text, "'"));
  }
}

nlohmann::json latest_checkpoint_args(const std::string& load_dir) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path index_path = fs::path(load_dir) / iteration_dir_name(iteration) / kIndex;
  json index = read_json_file(index_path);
  TESSERA_CHECK(index.contains("args") && index["args"].is_object(), "checkpoint index ", index_path.string(),
                " has no args record");
  return index["args"];
}

TrainingState load_checkpoint(const std::string& load_dir, model::ParameterSet& params,
                              optim::AdamWOptimizer* optimizer) {
  int64_t iteration = latest_checkpointed_iteration(load_dir);
  TESSERA_CHECK(iteration >= 0, "no checkpoint in ", load_dir, ": ", kTracker, " is missing");
  fs::path dir = fs::path(load_dir) / iteration_dir_name(iteration);
  fs::path index_path = dir / kIndex;
  json index = read_json_file(index_path);

  TrainingState state;
  json tensors;
  try {
    TESSERA_CHECK(index.at("format") == "tessera-checkpoint", "unknown format");
    state.iteration = index.at("iteration").get<int64_t>();
    state.consumed_train_samples = index.at("consumed_train_samples").get<int64_t>();
    state.skipped_iterations = index.at("skipped_iterations").get<int64_t>();
    state.seed = index.at("seed").get<uint64_t>();
    state.args = index.at("args");
    tensors = index.at("tensors");
    for (auto& [name, file] : index.at("files").items()) {
      fs::path p = dir / name;
      TESSERA_CHECK(fs::exists(p), "checkpoint file ", p.string(), " is missing");
      auto bytes = file.at("bytes").get<uint64_t>();
      TESSERA_CHECK(fs::file_size(p) == bytes, "checkpoint file ", p.string(), " has ", fs::file_size(p),
                    " bytes, the index says ", bytes);
    }
  } catch (const json::exception& e) {
    throw Error(str_cat("checkpoint index ", index_path.string(), " is malformed: ", e.what()));
  }
  TESSERA_CHECK(state.iteration == iteration, "checkpoint index ", index_path.string(), " is for iteration ",
                state.iteration, ", the tracker says ", iteration);

  std::map<std::string, SafetensorsFile> open_files;
  auto load_tensor = [&](const std::string& key, const model::ParameterSpec& spec, const Tensor& dst) {
    TESSERA_CHECK(tensors.contains(key), "checkpoint ", index_path.string(), " has no tensor ", key);
    try {
      const json& e = tensors[key];
      Shape global = e.at("global_shape").get<Shape>();
      TESSERA_CHECK(global == spec.global_shape(), "checkpoint tensor ", key, " in ", index_path.string(),
                    " has shape ", shape_str(global), ", the model expects ", shape_str(spec.global_shape()));
      for (const json& slice : e.at("slices")) {
        if (!same_slice(slice, spec)) continue;
        std::string file = slice.at("file").get<std::string>();
        auto it = open_files.find(file);
        if (it == open_files.end()) it = open_files.emplace(file, SafetensorsFile::open((dir / file).string())).first;
        it->second.read_into(slice.at("key").get<std::string>(), dst);
        return;
      }
    } catch (const json::exception& ex) {
      throw Error(str_cat("checkpoint index ", index_path.string(), ": entry of ", key, " is malformed: ", ex.what()));
    }
    throw Error(str_cat("checkpoint ", index_path.string(), " holds no slice of ", key,
                        " split as this run splits it (it was saved with another tensor-parallel size; loading "
                        "into a different layout is not supported yet)"));
  };

  for (model::Parameter& p : params.params()) load_tensor(p.spec.name, p.spec, p.value);
  if (optimizer) {
    TESSERA_CHECK(index.value("has_optimizer", false), "checkpoint ", dir.string(),
                  " holds no optimizer state (use --no-load-optim or --finetune)");
    for (model::Parameter& p : params.params()) {
      int64_t n = p.value.numel();
      load_tensor("optimizer.exp_avg." + p.spec.name, p.spec,
                  optimizer->exp_avg().flat_range(p.offset, n).view(p.spec.shape));
      load_tensor("optimizer.exp_avg_sq." + p.spec.name, p.spec,
                  optimizer->exp_avg_sq().flat_range(p.offset, n).view(p.spec.shape));
    }
    optimizer->set_steps(index.at("optimizer_steps").get<int64_t>());
  }
  return state;
}

}  // namespace tessera::ckpt
