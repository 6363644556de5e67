#include "ckpt/dcp_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string_view>

#include "ckpt/pickle_reader.h"
#include "core/check.h"
#include "core/file_io.h"

namespace tessera::ckpt {

// As torch_file.cc and megatron_legacy.cc (the layer builds as unity batches).
using PK = PyValue::Kind;
namespace fs = std::filesystem;

namespace {

// The module paths of DCP's classes: PyTorch 1.13's and 2.x's.
constexpr std::string_view kModules[] = {"torch.distributed.checkpoint.", "torch.distributed._shard.checkpoint."};
// TensorProperties lived with ShardedTensor in 1.13.
constexpr std::string_view kPropertiesModules[] = {"torch.distributed.checkpoint.metadata.TensorProperties",
                                                   "torch.distributed._shard.sharded_tensor.metadata.TensorProperties"};
constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30;

// `class_path` is DCP's `module.name` ("metadata.Metadata", "filesystem._StorageInfo") under either
// PyTorch's module names.
bool is_dcp_class(const std::string& class_path, std::string_view module_and_name) {
  for (std::string_view m : kModules)
    if (class_path.size() == m.size() + module_and_name.size() && class_path.compare(0, m.size(), m) == 0 &&
        class_path.compare(m.size(), std::string::npos, module_and_name) == 0)
      return true;
  return false;
}

class MetadataParser {
 public:
  explicit MetadataParser(std::string path) : path_(std::move(path)) {}

  template <typename... Args>
  [[noreturn]] void fail(const std::string& key, const Args&... args) const {
    throw Error(str_cat(path_, ": ", key.empty() ? std::string() : "'" + key + "': ", args...));
  }

  // A dataclass's attributes: its BUILD state, a dict (or, with __slots__, the pair (dict, slots)).
  const PyValue* attr(const PyValue* obj, const char* name, const std::string& key, const char* what) const {
    if (!obj || !obj->is(PK::Object)) fail(key, what, " is ", obj ? py_repr(*obj) : "missing", ", not an object");
    const PyValue* st = obj->state;
    const PyValue* v = nullptr;
    if (st && st->is(PK::Dict)) v = st->get(name);
    if (!v && st && st->is(PK::Tuple))
      for (const PyValue* part : st->items)
        if (part->is(PK::Dict) && (v = part->get(name))) break;
    if (!v) fail(key, what, " (", obj->text, ") has no '", name, "'");
    return v;
  }

  int64_t integer(const PyValue* v, const std::string& key, const char* what) const {
    if (!v->is(PK::Int)) fail(key, what, " is ", py_repr(*v), ", not an integer");
    if (v->integer < 0) fail(key, what, " is negative (", v->integer, ")");
    return v->integer;
  }

  // torch.Size((...)) or a plain tuple.
  Shape size(const PyValue* v, const std::string& key, const char* what) const {
    if (v->is(PK::Object) && classify(v->text).known == KnownClass::TorchSize && v->items.size() == 1) v = v->items[0];
    if (v->is(PK::Object) && classify(v->text).known == KnownClass::TorchSize && v->items.empty()) return {};
    if (!v->is(PK::Tuple) && !v->is(PK::List)) fail(key, what, " is ", py_repr(*v), ", not a torch.Size");
    if (v->items.size() > 64) fail(key, what, " has ", v->items.size(), " dimensions");
    Shape out;
    for (const PyValue* x : v->items) out.push_back(integer(x, key, what));
    return out;
  }

  TorchScalar dtype(const PyValue* properties, const std::string& key) const {
    if (!properties->is(PK::Object) ||
        std::none_of(std::begin(kPropertiesModules), std::end(kPropertiesModules),
                     [&](std::string_view p) { return properties->text == p; }))
      fail(key, "properties are ", py_repr(*properties), ", not a TensorProperties");
    // PyTorch pickles TensorProperties as the tuple (dtype, layout, requires_grad, memory format,
    // pin_memory) through its __getstate__; a dict state is read too.
    const PyValue* st = properties->state;
    const PyValue* d = nullptr;
    if (st && st->is(PK::Tuple) && !st->items.empty()) d = st->items[0];
    if (st && st->is(PK::Dict)) d = st->get("dtype");
    const ClassInfo info = d && d->is(PK::Global) ? classify(d->text) : ClassInfo{};
    if (info.known != KnownClass::TorchDtype || info.scalar == TorchScalar::Unknown)
      fail(key, "dtype ", d ? py_repr(*d) : "missing", " is not a torch dtype read here");
    return info.scalar;
  }

  std::string path_;
};

// The volume of a shape, or -1 on overflow.
int64_t volume(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

std::string offsets_key(const std::string& fqn, const Shape* offsets) {
  return offsets ? fqn + "@" + shape_str(*offsets) : fqn + "@bytes";
}

}  // namespace

DcpCheckpoint DcpCheckpoint::open(const std::string& dir) {
  DcpCheckpoint ck;
  ck.dir_ = dir;
  ck.metadata_path_ = (fs::path(dir) / ".metadata").string();
  const std::string& path = ck.metadata_path_;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail_in_file(path, "is missing: ", dir, " is not a PyTorch DCP checkpoint");
  const uint64_t bytes = fs::file_size(path, ec);
  if (ec || bytes > kMaxMetadataBytes) fail_in_file(path, "cannot be read (", ec ? ec.message() : "over 1 GiB", ")");
  std::ifstream in(path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (text.size() != bytes) fail_in_file(path, "cannot be read whole");
  const Pickle pickle = parse_pickle(text, path);  // DCP metadata holds no persistent ids
  MetadataParser m(path);
  const PyValue& root = pickle.root();
  if (!root.is(PK::Object) || !is_dcp_class(root.text, "metadata.Metadata"))
    m.fail("", "holds ", py_repr(root, 1), ", not a DCP Metadata (torch.distributed.checkpoint.metadata.Metadata)");
  const PyValue* sdm = m.attr(&root, "state_dict_metadata", "", "the Metadata");
  const PyValue* storage = m.attr(&root, "storage_data", "", "the Metadata");
  if (!sdm->is(PK::Dict)) m.fail("", "state_dict_metadata is a ", py_kind_name(sdm->kind), ", not a dict");
  if (!storage->is(PK::Dict))
    m.fail("", "storage_data is ", py_repr(*storage, 1), ", not a dict of where each item is stored");

  // Where each item is: (key, chunk offsets) -> file, offset, length.
  std::map<std::string, DcpChunk> stored;
  for (const auto& [index, info] : storage->entries) {
    if (!index->is(PK::Object) || !is_dcp_class(index->text, "metadata.MetadataIndex"))
      m.fail("", "storage_data has a key ", py_repr(*index, 2), ", not a MetadataIndex");
    const PyValue* fqn = m.attr(index, "fqn", "", "a MetadataIndex");
    if (!fqn->is(PK::String)) m.fail("", "a MetadataIndex's fqn is ", py_repr(*fqn), ", not a string");
    const std::string& key = fqn->text;
    const PyValue* off = index->state && index->state->is(PK::Dict) ? index->state->get("offset") : nullptr;
    Shape offsets;
    const bool has_offsets = off && !off->is(PK::None);
    if (has_offsets) offsets = m.size(off, key, "the storage index's offset");
    if (!info->is(PK::Object) || !is_dcp_class(info->text, "filesystem._StorageInfo"))
      m.fail(key, "stored as ", py_repr(*info, 2), ", not a _StorageInfo (relative_path, offset, length)");
    DcpChunk c;
    const PyValue* rel = m.attr(info, "relative_path", key, "its _StorageInfo");
    if (!rel->is(PK::String)) m.fail(key, "relative_path is ", py_repr(*rel), ", not a string");
    c.file = rel->text;
    const fs::path relative(c.file);
    if (c.file.empty() || relative.is_absolute() ||
        std::any_of(relative.begin(), relative.end(), [](const fs::path& p) { return p == ".."; }))
      m.fail(key, "relative_path '", c.file, "' is not a file inside the checkpoint directory");
    c.offset = static_cast<uint64_t>(m.integer(m.attr(info, "offset", key, "its _StorageInfo"), key, "the item's offset"));
    c.length = static_cast<uint64_t>(m.integer(m.attr(info, "length", key, "its _StorageInfo"), key, "the item's length"));
    if (const PyValue* st = info->state; st && st->is(PK::Dict))
      if (const PyValue* t = st->get("transform_descriptors"); t && !t->is(PK::None) && !t->items.empty())
        m.fail(key, "is stored through the storage transforms ", py_repr(*t),
               " (PyTorch 2.8's DCP extensions, such as compression), which are not read");
    if (!stored.emplace(offsets_key(key, has_offsets ? &offsets : nullptr), c).second)
      m.fail(key, "storage_data lists the item at offsets ", shape_str(offsets), " twice");
  }

  // The data files' sizes, each looked up once.
  std::map<std::string, uint64_t> file_sizes;
  auto file_size = [&](const DcpChunk& c, const std::string& key) {
    auto it = file_sizes.find(c.file);
    if (it == file_sizes.end()) {
      const fs::path f = fs::path(dir) / c.file;
      std::error_code e;
      const uint64_t n = fs::is_regular_file(f, e) ? fs::file_size(f, e) : 0;
      if (!fs::is_regular_file(f, e))
        fail_in_file(f.string(), "is missing (", path, " stores '", key, "' in it)");
      it = file_sizes.emplace(c.file, n).first;
    }
    return it->second;
  };
  auto place = [&](DcpChunk& c, const std::string& key, const Shape* offsets) {
    auto it = stored.find(offsets_key(key, offsets));
    if (it == stored.end())
      m.fail(key, "has no storage_data entry for its chunk", offsets ? " at offsets " + shape_str(*offsets) : std::string());
    c.file = it->second.file;
    c.offset = it->second.offset;
    c.length = it->second.length;
    const uint64_t size = file_size(c, key);
    if (c.offset > size || c.length > size - c.offset)
      fail_in_file((fs::path(dir) / c.file).string(), "item '", key, "'",
                   offsets ? " (chunk at offsets " + shape_str(*offsets) + ")" : std::string(), ": bytes [", c.offset,
                   ", ", c.offset + c.length, ") run past the end of the file, which has ", size,
                   " bytes (truncated?)");
    stored.erase(it);
  };

  for (const auto& [k, md] : sdm->entries) {
    if (!k->is(PK::String)) m.fail("", "state_dict_metadata has a key ", py_repr(*k), ", not a string");
    DcpEntry e;
    e.key = k->text;
    const std::string& key = e.key;
    if (!md->is(PK::Object)) m.fail(key, "is described by ", py_repr(*md, 2), ", not a storage metadata object");
    if (is_dcp_class(md->text, "metadata.BytesStorageMetadata")) {
      e.tensor = false;
      DcpChunk c;
      place(c, key, nullptr);
      e.chunks.push_back(c);
    } else if (is_dcp_class(md->text, "metadata.TensorStorageMetadata")) {
      e.dtype = m.dtype(m.attr(md, "properties", key, "its TensorStorageMetadata"), key);
      e.size = m.size(m.attr(md, "size", key, "its TensorStorageMetadata"), key, "the size");
      const int64_t total = volume(e.size);
      if (total < 0) m.fail(key, "size ", shape_str(e.size), " overflows");
      const PyValue* chunks = m.attr(md, "chunks", key, "its TensorStorageMetadata");
      if (!chunks->is(PK::List)) m.fail(key, "chunks is a ", py_kind_name(chunks->kind), ", not a list");
      int64_t covered = 0;
      for (const PyValue* ch : chunks->items) {
        if (!ch->is(PK::Object) || !is_dcp_class(ch->text, "metadata.ChunkStorageMetadata"))
          m.fail(key, "a chunk is ", py_repr(*ch, 2), ", not a ChunkStorageMetadata");
        DcpChunk c;
        c.offsets = m.size(m.attr(ch, "offsets", key, "a chunk"), key, "a chunk's offsets");
        c.sizes = m.size(m.attr(ch, "sizes", key, "a chunk"), key, "a chunk's sizes");
        if (c.offsets.size() != e.size.size() || c.sizes.size() != e.size.size())
          m.fail(key, "a chunk at offsets ", shape_str(c.offsets), " of sizes ", shape_str(c.sizes),
                 " has another rank than the tensor's size ", shape_str(e.size));
        for (size_t d = 0; d < e.size.size(); ++d)
          if (c.offsets[d] > e.size[d] || c.sizes[d] > e.size[d] - c.offsets[d])
            m.fail(key, "the chunk at offsets ", shape_str(c.offsets), " of sizes ", shape_str(c.sizes),
                   " reaches outside the tensor's size ", shape_str(e.size));
        if (__builtin_add_overflow(covered, volume(c.sizes), &covered)) m.fail(key, "its chunks overflow its size");
        place(c, key, &c.offsets);
        e.chunks.push_back(std::move(c));
      }
      // The chunks must cover the tensor exactly once: no two overlap, and their volumes add up.
      std::vector<const DcpChunk*> order;
      for (const DcpChunk& c : e.chunks) order.push_back(&c);
      if (!e.size.empty()) {
        std::sort(order.begin(), order.end(), [](const DcpChunk* a, const DcpChunk* b) { return a->offsets < b->offsets; });
        for (size_t i = 0; i < order.size(); ++i)
          for (size_t j = i + 1; j < order.size() && order[j]->offsets[0] < order[i]->offsets[0] + order[i]->sizes[0]; ++j) {
            bool overlap = true;
            for (size_t d = 0; d < e.size.size() && overlap; ++d)
              overlap = order[i]->offsets[d] < order[j]->offsets[d] + order[j]->sizes[d] &&
                        order[j]->offsets[d] < order[i]->offsets[d] + order[i]->sizes[d];
            if (overlap && volume(order[i]->sizes) > 0 && volume(order[j]->sizes) > 0)
              m.fail(key, "the chunks at offsets ", shape_str(order[i]->offsets), " and ", shape_str(order[j]->offsets),
                     " overlap");
          }
      }
      if (covered != total)
        m.fail(key, "its chunks hold ", covered, " of the ", total, " elements of its size ", shape_str(e.size),
               e.chunks.empty() ? " (it has no chunks)" : "");
    } else {
      m.fail(key, "is described by a ", md->text, ", not a TensorStorageMetadata or BytesStorageMetadata");
    }
    if (!ck.by_key_.emplace(key, ck.entries_.size()).second) m.fail(key, "appears twice");
    ck.entries_.push_back(std::move(e));
  }
  return ck;
}

const DcpEntry* DcpCheckpoint::find(const std::string& key) const {
  const auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &entries_[it->second];
}

std::string DcpCheckpoint::item_label(const DcpEntry& e, const DcpChunk& c) const {
  return str_cat((fs::path(dir_) / c.file).string(), ": item '", e.key, "'",
                 e.tensor ? " (chunk at offsets " + shape_str(c.offsets) + ")" : std::string(), ", bytes [", c.offset,
                 ", ", c.offset + c.length, ")");
}

Tensor DcpCheckpoint::read_chunk(const DcpEntry& e, const DcpChunk& c) const {
  const size_t index = static_cast<size_t>(&c - e.chunks.data());
  if (cache_.tensor.defined() && cache_.key == e.key && cache_.index == index) return cache_.tensor;
  const std::string file = (fs::path(dir_) / c.file).string();
  const std::string label = item_label(e, c);
  // A torch.save archive starts with a zip local header; anything else must be the raw elements.
  const size_t es = torch_scalar_size(e.dtype);
  const int64_t numel = volume(c.sizes);
  char magic[4] = {0, 0, 0, 0};
  {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_in_file(label, "cannot open: ", std::strerror(errno));
    OwnedFd owned(fd);
    if (c.length >= 4 && ::pread(fd, magic, 4, static_cast<off_t>(c.offset)) != 4)
      fail_in_file(label, "cannot read: ", std::strerror(errno));
    if (std::memcmp(magic, "PK\x03\x04", 4) != 0) {
      if (c.length != static_cast<uint64_t>(numel) * es)
        fail_in_file(label, "is neither a torch.save archive nor the ", static_cast<uint64_t>(numel) * es,
                     " raw bytes of its ", shape_str(c.sizes), " ", torch_scalar_name(e.dtype), " elements (",
                     c.length, " bytes)");
      std::vector<char> raw(c.length);
      uint64_t done = 0;
      while (done < c.length) {
        const ssize_t r = ::pread(fd, raw.data() + done, c.length - done, static_cast<off_t>(c.offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) fail_in_file(label, "cannot read: ", r < 0 ? std::strerror(errno) : "the file ends early");
        done += static_cast<uint64_t>(r);
      }
      cache_ = {e.key, index, torch_bytes_to_tensor(raw.data(), e.dtype, c.sizes)};
      return cache_.tensor;
    }
  }
  StateNode n = load_torch_segment(file, label, c.offset, c.length);
  if (!n.is(StateNode::Kind::Tensor)) fail_in_file(label, "holds a ", state_kind_name(n.kind), ", not a tensor");
  if (n.tensor.shape() != c.sizes)
    fail_in_file(label, "holds a tensor of shape ", shape_str(n.tensor.shape()), " but its chunk is ", shape_str(c.sizes));
  if (n.stored != e.dtype)
    fail_in_file(label, "holds ", torch_scalar_name(n.stored), " elements but .metadata records ",
                 torch_scalar_name(e.dtype));
  cache_ = {e.key, index, n.tensor};
  return n.tensor;
}

Tensor DcpCheckpoint::read(const DcpEntry& e, int64_t begin, int64_t count) const {
  TESSERA_CHECK(e.tensor, metadata_path_, ": '", e.key, "' is a bytes entry, not a tensor");
  Shape region = e.size;
  if (!region.empty()) {
    TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= e.size[0], metadata_path_, ": '", e.key, "': rows [",
                  begin, ", ", begin + count, ") asked of a tensor of size ", shape_str(e.size));
    region[0] = count;
  }
  const DType dt = torch_tensor_dtype(e.dtype);
  const size_t es = dtype_size(dt);
  Tensor out = Tensor::empty(region, dt, Device::cpu());
  if (out.numel() == 0) return out;
  const size_t rank = region.size();
  // Row-major strides of the output and of a chunk, in elements.
  auto strides_of = [&](const Shape& s) {
    Shape st(s.size(), 1);
    for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
    return st;
  };
  const Shape out_strides = strides_of(region);
  auto* dst = static_cast<char*>(out.host_raw());
  for (const DcpChunk& c : e.chunks) {
    // The overlap of the chunk with rows [begin, begin + count), in global coordinates.
    Shape lo(rank), hi(rank);
    bool empty = false;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t a = d == 0 ? std::max(c.offsets[0], begin) : c.offsets[d];
      const int64_t b = d == 0 ? std::min(c.offsets[0] + c.sizes[0], begin + count) : c.offsets[d] + c.sizes[d];
      lo[d] = a;
      hi[d] = b;
      empty = empty || a >= b;
    }
    if (empty) continue;
    const Tensor chunk = read_chunk(e, c);
    const auto* src = static_cast<const char*>(chunk.host_raw());
    if (rank == 0) {
      std::memcpy(dst, src, es);
      continue;
    }
    const Shape chunk_strides = strides_of(c.sizes);
    // Copy the overlap a last-dimension run at a time, odometer over the other dimensions.
    const int64_t run = hi[rank - 1] - lo[rank - 1];
    Shape idx = lo;
    while (true) {
      int64_t s = 0, o = 0;
      for (size_t d = 0; d < rank; ++d) {
        s += (idx[d] - c.offsets[d]) * chunk_strides[d];
        o += (idx[d] - (d == 0 ? begin : 0)) * out_strides[d];
      }
      std::memcpy(dst + o * es, src + s * es, static_cast<size_t>(run) * es);
      size_t d = rank - 1;
      while (d-- > 0) {
        if (++idx[d] < hi[d]) break;
        idx[d] = lo[d];
      }
      if (d == static_cast<size_t>(-1)) break;
    }
  }
  return out;
}

StateNode DcpCheckpoint::read_object(const DcpEntry& e) const {
  TESSERA_CHECK(!e.tensor && e.chunks.size() == 1, metadata_path_, ": '", e.key, "' is a tensor, not a bytes entry");
  const DcpChunk& c = e.chunks[0];
  return load_torch_segment((fs::path(dir_) / c.file).string(), item_label(e, c), c.offset, c.length);
}

}  // namespace tessera::ckpt
