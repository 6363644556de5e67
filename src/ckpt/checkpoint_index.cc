#include "ckpt/checkpoint_index.h"

#include <limits>

namespace tessera::ckpt {
namespace {
using nlohmann::json;

template <typename... Args>
[[noreturn]] void fail_index(const std::string& path, const Args&... args) {
  throw Error(str_cat("checkpoint index ", path, " ", args...));
}

const json& field(const json& obj, const char* name, json::value_t type, const std::string& path,
                  const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end()) fail_index(path, where, "has no field '", name, "'");
  bool ok = it->type() == type || (type == json::value_t::number_integer && it->is_number_unsigned()) ||
            (type == json::value_t::number_unsigned && it->is_number_unsigned());
  if (!ok) fail_index(path, where, "field '", name, "' is ", it->type_name(), ", not ", json(type).type_name());
  return *it;
}

int64_t int_field(const json& obj, const char* name, const std::string& path, const std::string& where,
                  int64_t min = 0) {
  const json& v = field(obj, name, json::value_t::number_integer, path, where);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail_index(path, where, "field '", name, "' is too large");
  int64_t x = v.get<int64_t>();
  if (x < min) fail_index(path, where, "field '", name, "' is ", x, ", below ", min);
  return x;
}

std::string string_field(const json& obj, const char* name, const std::string& path, const std::string& where) {
  return field(obj, name, json::value_t::string, path, where).get<std::string>();
}

// A shape of non-negative dimensions whose element count fits in int64.
Shape shape_field(const json& obj, const char* name, const std::string& path, const std::string& where) {
  const json& a = field(obj, name, json::value_t::array, path, where);
  Shape s;
  int64_t n = 1;
  for (const json& d : a) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 ||
        (d.is_number_unsigned() && d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
      fail_index(path, where, "field '", name, "' ", a.dump(), " is not a list of non-negative integers");
    s.push_back(d.get<int64_t>());
    if (__builtin_mul_overflow(n, s.back(), &n)) fail_index(path, where, "field '", name, "' ", a.dump(), " is too large");
  }
  return s;
}

std::optional<uint32_t> crc_field(const json& obj, const std::string& path, const std::string& where,
                                  bool required) {
  if (!obj.contains("crc32c")) {
    if (required) fail_index(path, where, "has no field 'crc32c'");
    return std::nullopt;
  }
  std::string s = string_field(obj, "crc32c", path, where);
  auto crc = parse_crc32c(s);
  if (!crc) fail_index(path, where, "checksum '", s, "' is not of the form crc32c:xxxxxxxx");
  return crc;
}

// A file named by the index must be a plain name inside the checkpoint directory.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

SavedSlice parse_slice(const json& e, const Shape& global, const std::map<std::string, SavedFile>& files,
                       bool need_crc, const std::string& path, const std::string& where) {
  if (!e.is_object()) fail_index(path, where, "is not an object");
  SavedSlice s;
  s.file = string_field(e, "file", path, where);
  s.key = string_field(e, "key", path, where);
  if (!files.count(s.file)) fail_index(path, where, "names file '", s.file, "', which the index does not list");
  Shape shape = shape_field(e, "shape", path, where);
  s.shape = shape;
  std::string dtype = string_field(e, "dtype", path, where);
  if (dtype != "fp32") fail_index(path, where, "dtype '", dtype, "' is not fp32");
  const int64_t dim = int_field(e, "dim", path, where, -1);
  if (dim < 0) {
    if (!e.contains("piece") && shape_numel(shape) != shape_numel(global))
      fail_index(path, where, "holds the whole tensor but has shape ", shape_str(shape), ", not ", shape_str(global));
    s.box = Box::whole(e.contains("piece") ? global : shape);
  } else {
    Shape view = shape_field(e, "view", path, where);
    if (dim >= static_cast<int64_t>(view.size())) fail_index(path, where, "split dimension ", dim, " is outside view ", shape_str(view));
    if (shape_numel(view) != shape_numel(global))
      fail_index(path, where, "view ", shape_str(view), " is not a view of the global shape ", shape_str(global));
    int64_t offset = int_field(e, "offset", path, where), length = int_field(e, "length", path, where);
    if (offset > view[dim] || length > view[dim] - offset)
      fail_index(path, where, "range [", offset, ", ", offset, " + ", length, ") runs past dimension ", dim, " of view ", shape_str(view));
    s.box = {view, static_cast<int>(dim), offset, offset + length};
  }
  int64_t stored = s.box.numel();
  if (e.contains("piece")) {
    const json& p = e["piece"];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
      fail_index(path, where, "piece is not a pair of integers [begin, end)");
    const int64_t b = p[0].get<int64_t>(), end = p[1].get<int64_t>();
    if (b < 0 || end <= b || end > stored)
      fail_index(path, where, "piece [", b, ", ", end, ") is not a non-empty range of the slice's ", stored, " elements");
    s.piece = {b, end};
    stored = end - b;
  }
  if (dim >= 0 && shape_numel(shape) != stored)
    fail_index(path, where, "has shape ", shape_str(shape), " but its range holds ", stored, " elements");
  s.crc32c = crc_field(e, path, where, need_crc);
  return s;
}

}  // namespace

std::optional<uint32_t> parse_crc32c(const std::string& s) {
  const std::string prefix = "crc32c:";
  if (s.size() != prefix.size() + 8 || s.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  uint32_t v = 0;
  for (size_t i = prefix.size(); i < s.size(); ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<uint32_t>(d);
  }
  return v;
}

CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail_index(path, "is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail_index(path, "is not a JSON object");
  CheckpointIndex index;
  if (string_field(j, "format", path, "") != "tessera-checkpoint") fail_index(path, "format is not tessera-checkpoint");
  index.version = static_cast<int>(int_field(j, "version", path, "", 1));
  if (index.version > kCheckpointIndexVersion)
    fail_index(path, "has version ", index.version, "; this build reads versions up to ", kCheckpointIndexVersion);
  const bool need_crc = index.version >= 2;
  index.iteration = int_field(j, "iteration", path, "");
  index.consumed_train_samples = int_field(j, "consumed_train_samples", path, "");
  index.skipped_iterations = int_field(j, "skipped_iterations", path, "");
  if (j.contains("skipped_train_samples")) index.skipped_train_samples = int_field(j, "skipped_train_samples", path, "");
  index.seed = field(j, "seed", json::value_t::number_unsigned, path, "").get<uint64_t>();
  index.optimizer_steps = int_field(j, "optimizer_steps", path, "");
  index.has_optimizer = field(j, "has_optimizer", json::value_t::boolean, path, "").get<bool>();
  if (!j.contains("args") || !(j["args"].is_object() || j["args"].is_null()))
    fail_index(path, "field 'args' is missing or not an object");
  index.args = j["args"].is_null() ? json::object() : j["args"];
  if (j.contains("loss_scaler")) {
    if (!j["loss_scaler"].is_object() && !j["loss_scaler"].is_null())
      fail_index(path, "field 'loss_scaler' is not an object");
    index.loss_scaler = j["loss_scaler"];
  }

  for (const auto& [name, f] : field(j, "files", json::value_t::object, path, "").items()) {
    std::string where = str_cat("file entry '", name, "' ");
    if (!plain_file_name(name)) fail_index(path, where, "is not a plain file name");
    if (!f.is_object()) fail_index(path, where, "is not an object");
    SavedFile sf;
    sf.bytes = static_cast<uint64_t>(int_field(f, "bytes", path, where));
    sf.crc32c = crc_field(f, path, where, need_crc);
    index.files[name] = sf;
  }
  if (j.contains("tokenizer_files"))
    for (const auto& [key, f] : field(j, "tokenizer_files", json::value_t::object, path, "").items()) {
      const std::string where = str_cat("tokenizer file '", key, "' ");
      if (!f.is_object()) fail_index(path, where, "is not an object");
      SavedTokenizerFile t{string_field(f, "file", path, where), {}};
      const std::string prefix = "tokenizer/";
      if (t.file.rfind(prefix, 0) != 0 || !plain_file_name(t.file.substr(prefix.size())))
        fail_index(path, where, "is not a file of the checkpoint's tokenizer/ directory: '", t.file, "'");
      t.saved.bytes = static_cast<uint64_t>(int_field(f, "bytes", path, where));
      t.saved.crc32c = crc_field(f, path, where, true);
      index.tokenizer_files[key] = t;
    }
  for (const auto& [name, t] : field(j, "tensors", json::value_t::object, path, "").items()) {
    std::string where = str_cat("tensor '", name, "' ");
    if (!t.is_object()) fail_index(path, where, "is not an object");
    SavedTensor st;
    st.global_shape = shape_field(t, "global_shape", path, where);
    const json& slices = field(t, "slices", json::value_t::array, path, where);
    if (slices.empty()) fail_index(path, where, "has no slices");
    for (size_t i = 0; i < slices.size(); ++i)
      st.slices.push_back(parse_slice(slices[i], st.global_shape, index.files, need_crc, path,
                                      str_cat(where, "slice ", i, " ")));
    index.tensors[name] = std::move(st);
  }
  return index;
}

}  // namespace tessera::ckpt
