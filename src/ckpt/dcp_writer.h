// Writing a PyTorch Distributed Checkpoint (DCP) directory (the inverse of dcp_reader.h), as the ranks of a
// job write one through PyTorch 2.x's FileSystemWriter (single_file_per_rank):
//
//   DIR/__R_0.distcp   rank R's items one after the other, each a whole torch.save archive: a tensor chunk's
//                      tensor, or a ShardedObject's object (its archive's bytes, as given)
//   DIR/.metadata      the pickled torch.distributed.checkpoint.metadata.Metadata: state_dict_metadata
//                      (each key's TensorStorageMetadata: TensorProperties, the global torch.Size and its
//                      chunks' offsets and sizes; or a BytesStorageMetadata), planner_data (each key's
//                      path in the flattened state dict: (key,)) and storage_data (each MetadataIndex(key,
//                      chunk offsets, chunk index) -> filesystem._StorageInfo(file, offset, length))
//
// The class paths are PyTorch 2.x's (torch.distributed.checkpoint.*), which Megatron-Core's
// dist_checkpointing loads through; PyTorch 1.13 has the same classes under torch.distributed._shard.*
// (a reader there maps the module paths). Items are written as they are added, each rank's file through an
// AtomicOutputFile, so a failed save leaves no data file behind; finish() writes .metadata last. Chunks are
// not checked for overlap or coverage here: the caller lays them out (dcp_reader.h checks both on reading).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/tensor.h"

namespace tessera::ckpt {

class DcpWriter {
 public:
  explicit DcpWriter(std::string dir);

  // The chunk of tensor `key` (global size `size`, stored as `stored`: F32, BF16 or F16 from an F32 chunk)
  // at `offsets`, written by rank `rank`. Every chunk of a key must have the same global size and dtype.
  void add_tensor(const std::string& key, const Shape& size, const Shape& offsets, const Tensor& chunk, DType stored,
                  int rank);
  // A ShardedObject `key` ("rng_state/shard_0.1_2.2"): a torch.save archive's bytes, written by `rank`.
  void add_object(const std::string& key, const std::string& archive, int rank);
  // Commits each rank's data file, then writes .metadata.
  void finish();

 private:
  struct Item {
    std::string key;
    Shape offsets, sizes;  // empty for an object
    bool object = false;
    int rank = 0;
    uint64_t offset = 0, length = 0;
  };
  struct TensorInfo {
    Shape size;
    DType stored = DType::F32;
  };
  struct RankFile {
    std::unique_ptr<AtomicOutputFile> out;
    uint64_t offset = 0;
  };
  void append(int rank, const std::string& bytes, Item item);

  std::string dir_;
  std::vector<Item> items_;
  std::vector<std::string> keys_;  // in the order first added (state_dict_metadata's)
  std::map<std::string, TensorInfo> tensors_;
  std::map<int, RankFile> files_;
};

}  // namespace tessera::ckpt
