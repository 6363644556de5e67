#include "ckpt/dcp_writer.h"

#include <filesystem>

#include "ckpt/pickle_writer.h"
#include "ckpt/torch_save.h"
#include "core/check.h"

namespace tessera::ckpt {

namespace {

constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";

PickleOut torch_size(const Shape& s) {
  std::vector<PickleOut> dims;
  for (const int64_t d : s) dims.push_back(PickleOut::int_of(d));
  return PickleOut::call("torch", "Size", {PickleOut::tuple(std::move(dims))});
}

// TensorProperties through its __setstate__: (dtype, layout, requires_grad, memory format, pin_memory), the
// memory format as the enum member its __getstate__ encodes (torch.memory_format does not pickle).
PickleOut tensor_properties(DType stored) {
  PickleOut layout = PickleOut::call("torch.serialization", "_get_layout", {PickleOut::str("torch.strided")});
  PickleOut format = PickleOut::call("builtins", "getattr", {PickleOut::global(kMetadataModule, "_MEM_FORMAT_ENCODING"),
                                                              PickleOut::str("TORCH_CONTIGUOUS_FORMAT")});
  return PickleOut::object(kMetadataModule, "TensorProperties",
                           PickleOut::tuple({torch_dtype_value(stored), std::move(layout), PickleOut::boolean_of(false),
                                             std::move(format), PickleOut::boolean_of(false)}));
}

}  // namespace

DcpWriter::DcpWriter(std::string dir) : dir_(std::move(dir)) { std::filesystem::create_directories(dir_); }

void DcpWriter::append(int rank, const std::string& bytes, Item item) {
  RankFile& f = files_[rank];
  if (!f.out) {
    const std::string path = (std::filesystem::path(dir_) / str_cat("__", rank, "_0.distcp")).string();
    f.out = std::make_unique<AtomicOutputFile>(path, path);
  }
  f.out->stream().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TESSERA_CHECK(f.out->stream().good(), dir_, ": writing rank ", rank, "'s data file failed");
  item.rank = rank;
  item.offset = f.offset;
  item.length = bytes.size();
  f.offset += bytes.size();
  items_.push_back(std::move(item));
}

void DcpWriter::add_tensor(const std::string& key, const Shape& size, const Shape& offsets, const Tensor& chunk,
                           DType stored, int rank) {
  TESSERA_CHECK(offsets.size() == size.size() && chunk.shape().size() == size.size(), "DCP ", dir_, ": ", key,
                " is ", shape_str(size), " but a chunk of it is ", shape_str(chunk.shape()), " at ", shape_str(offsets));
  for (size_t d = 0; d < size.size(); ++d)
    TESSERA_CHECK(offsets[d] >= 0 && offsets[d] + chunk.shape()[d] <= size[d], "DCP ", dir_, ": ", key, "'s chunk ",
                  shape_str(chunk.shape()), " at ", shape_str(offsets), " is outside ", shape_str(size));
  const auto [it, added] = tensors_.emplace(key, TensorInfo{size, stored});
  if (added) keys_.push_back(key);
  TESSERA_CHECK(it->second.size == size && it->second.stored == stored, "DCP ", dir_, ": ", key,
                " is added with two global sizes or dtypes");
  TorchSaveWriter writer;  // FileSystemWriter torch.saves each tensor item on its own
  const PickleOut root = writer.tensor(chunk, stored);
  append(rank, writer.bytes(root), Item{key, offsets, chunk.shape(), false});
}

void DcpWriter::add_object(const std::string& key, const std::string& archive, int rank) {
  TESSERA_CHECK(!tensors_.count(key), "DCP ", dir_, ": ", key, " is both a tensor and an object");
  keys_.push_back(key);
  append(rank, archive, Item{key, {}, {}, true});
}

void DcpWriter::finish() {
  for (auto& [rank, f] : files_) f.out->commit();
  // The chunks of each tensor key, in the order added (each MetadataIndex's index is its place there).
  std::map<std::string, std::vector<const Item*>> chunks;
  for (const Item& item : items_)
    if (!item.object) chunks[item.key].push_back(&item);
  PickleOut state_dict = PickleOut::dict(), planner = PickleOut::dict();
  for (const std::string& key : keys_) {
    planner.set(key, PickleOut::tuple({PickleOut::str(key)}));
    const auto t = tensors_.find(key);
    if (t == tensors_.end()) {
      state_dict.set(key, PickleOut::object(kMetadataModule, "BytesStorageMetadata", PickleOut::dict()));
      continue;
    }
    std::vector<PickleOut> list;
    for (const Item* c : chunks[key])
      list.push_back(PickleOut::object(kMetadataModule, "ChunkStorageMetadata",
                                       PickleOut::dict().set("offsets", torch_size(c->offsets)).set("sizes", torch_size(c->sizes))));
    state_dict.set(key, PickleOut::object(kMetadataModule, "TensorStorageMetadata",
                                          PickleOut::dict()
                                              .set("properties", tensor_properties(t->second.stored))
                                              .set("size", torch_size(t->second.size))
                                              .set("chunks", PickleOut::list(std::move(list)))));
  }
  std::vector<std::pair<PickleOut, PickleOut>> storage;
  std::map<std::string, int64_t> index;  // each tensor key's next chunk index
  for (const Item& item : items_) {
    PickleOut where = PickleOut::dict().set("fqn", PickleOut::str(item.key));
    if (item.object) {
      where.set("offset", PickleOut::none()).set("index", PickleOut::none());
    } else {
      where.set("offset", torch_size(item.offsets)).set("index", PickleOut::int_of(index[item.key]++));
    }
    storage.emplace_back(PickleOut::object(kMetadataModule, "MetadataIndex", std::move(where)),
                         PickleOut::object("torch.distributed.checkpoint.filesystem", "_StorageInfo",
                                           PickleOut::dict()
                                               .set("relative_path", PickleOut::str(str_cat("__", item.rank, "_0.distcp")))
                                               .set("offset", PickleOut::int_of(static_cast<int64_t>(item.offset)))
                                               .set("length", PickleOut::int_of(static_cast<int64_t>(item.length)))));
  }
  const PickleOut metadata = PickleOut::object(kMetadataModule, "Metadata",
                                               PickleOut::dict()
                                                   .set("state_dict_metadata", std::move(state_dict))
                                                   .set("planner_data", std::move(planner))
                                                   .set("storage_data", PickleOut::pair_dict(std::move(storage))));
  const std::string path = (std::filesystem::path(dir_) / ".metadata").string();
  AtomicOutputFile out(path, path);
  const std::string bytes = write_pickle(metadata);
  out.stream().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.commit();
}

}  // namespace tessera::ckpt
