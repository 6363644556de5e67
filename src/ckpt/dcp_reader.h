// Reading a PyTorch Distributed Checkpoint (DCP) directory, as Megatron-LM's torch_dist format holds one
// per iteration, without Python:
//
//   DIR/.metadata        a pickled Metadata: state_dict_metadata maps each key to a TensorStorageMetadata
//                        (properties with the dtype, the global size, and the chunks: offsets and sizes
//                        within it) or a BytesStorageMetadata (a torch.save'd object); storage_data maps
//                        each MetadataIndex (key, chunk offsets) to a _StorageInfo (relative_path,
//                        offset, length) naming the bytes of a data file that hold it
//   DIR/__R_I.distcp     data files (rank R's I-th): items one after the other, each a whole torch.save
//                        archive of the chunk's tensor (or of the object), as FileSystemWriter writes them
//                        in PyTorch 1.13 (torch.distributed._shard.checkpoint) and 2.x
//                        (torch.distributed.checkpoint) alike
//
// Class paths of both module names are accepted. Both writers torch.save every tensor item; an item that
// is not a zip archive but exactly the chunk's raw little-endian bytes (numel x element size, as a writer
// that dumps storages would write) is read too. Items that PyTorch 2.8's storage transforms changed
// (_StorageInfo.transform_descriptors, e.g. compression) are refused by name.
//
// The metadata is checked when the directory is opened: every chunk inside its tensor, the chunks
// covering it exactly once, every item inside its file (a chunk pointing past a file's end names the
// file and the key), no path leaving the directory. Tensors are then read a region at a time, each item
// by offset (pread), so no data file is ever read whole: a caller assembles a stacked [layers, ...]
// tensor one layer at a time.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/torch_file.h"
#include "core/tensor.h"

namespace tessera::ckpt {

struct DcpChunk {
  Shape offsets, sizes;  // within the global tensor (empty for a bytes entry)
  std::string file;      // relative to the directory: "__0_0.distcp"
  uint64_t offset = 0, length = 0;
};

struct DcpEntry {
  std::string key;
  bool tensor = true;  // false: a BytesStorageMetadata (a torch.save'd Python object)
  TorchScalar dtype = TorchScalar::Unknown;
  Shape size;                   // the global size
  std::vector<DcpChunk> chunks;  // a bytes entry has one
};

class DcpCheckpoint {
 public:
  // Reads and checks DIR/.metadata; errors name it and the key.
  static DcpCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& metadata_path() const { return metadata_path_; }
  const std::vector<DcpEntry>& entries() const { return entries_; }
  const DcpEntry* find(const std::string& key) const;  // nullptr if absent

  // Rows [begin, begin + count) along axis 0 of a tensor entry (the whole tensor for a 0-d one),
  // assembled from the chunks that overlap them, as a contiguous tensor of torch_tensor_dtype(dtype).
  // Each item read is checked against its chunk (a torch.save'd tensor of the chunk's size and dtype);
  // an error names the data file, the key and the item's bytes.
  Tensor read(const DcpEntry& entry, int64_t begin, int64_t count) const;
  Tensor read(const DcpEntry& entry) const { return read(entry, 0, entry.size.empty() ? 1 : entry.size[0]); }
  // A bytes entry's object, as torch.load would give it (through load_torch_segment).
  StateNode read_object(const DcpEntry& entry) const;

 private:
  Tensor read_chunk(const DcpEntry& entry, const DcpChunk& chunk) const;
  std::string item_label(const DcpEntry& entry, const DcpChunk& chunk) const;

  std::string dir_, metadata_path_;
  std::vector<DcpEntry> entries_;
  std::unordered_map<std::string, size_t> by_key_;
  // The last chunk read (its key and index): a chunk that spans several rows, read a row at a time, is
  // read once.
  struct Cached {
    std::string key;
    size_t index = 0;
    Tensor tensor;
  };
  mutable Cached cache_;
};

}  // namespace tessera::ckpt
