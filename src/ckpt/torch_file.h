// Reading a torch.save file (the zip format of PyTorch >= 1.6, as Megatron's legacy
// model_optim_rng.pt and distrib_optim.pt are) into a tree of plain values and Tessera tensors,
// without Python: ZipReader finds `<prefix>/data.pkl` and the storages `<prefix>/data/<key>`, the
// pickle machine (pickle_reader.h) builds an inert value tree, and this file turns its
// _rebuild_tensor_v2 calls into tensors, its argparse.Namespace into an object with entries, its
// numpy scalars into numbers, and anything else it does not know into a placeholder Object.
//
// Each tensor is copied out of its storage (storage offset, sizes and strides honoured, so a transposed
// or sliced view comes out contiguous, as Tessera's tensors always are). Element types map to
// core/dtype.h's: fp32, bf16, fp16, int32 and int64 as they are; fp64 becomes fp32; int16, int8, uint8
// and bool become int32, uint32 int64; StateNode::stored keeps what torch had. A numpy array (Megatron's
// saved numpy RNG state) becomes a tensor the same way. Two tensors on one storage each get
// their own copy; one tensor object reached twice (the memo) is the same Tessera tensor twice.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/pickle_reader.h"
#include "core/tensor.h"

namespace tessera::ckpt {

struct StateEntry;

struct StateNode {
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, Tensor, Object };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;  // String, Bytes; Object: its class path ("megatron.core.enums.ModelType")
  Tensor tensor;     // Tensor: a contiguous CPU tensor
  TorchScalar stored = TorchScalar::Unknown;  // Tensor: the element type torch stored
  std::vector<StateNode> items;               // List, Tuple; Object: its arguments
  // Dict, in order; a key that is not a string is written as Python would print it ("0", "(1, 2)").
  // Object: the entries of its state when that is a dict (an argparse.Namespace's attributes), then
  // any it was given by SETITEMS; a state of another kind is the entry "__state__".
  std::vector<StateEntry> entries;

  bool is(Kind k) const { return kind == k; }
  const StateNode* find(std::string_view key) const;  // nullptr if absent (or not a Dict/Object)
};

// A named value of a Dict or Object (a struct, not a std::pair, which may not hold the incomplete StateNode).
struct StateEntry {
  std::string key;
  StateNode value;
};

const char* state_kind_name(StateNode::Kind kind);

// The Tessera element type a torch element type is read as (fp64 as fp32, small integers as int32, ...),
// and n contiguous little-endian elements of type `s` read so.
DType torch_tensor_dtype(TorchScalar s);
Tensor torch_bytes_to_tensor(const char* data, TorchScalar s, const Shape& shape);

// Opens the file, checks the archive and reads every tensor. Errors name the file and, for a value
// inside, its path in the tree ("model.language_model.embedding.word_embeddings.weight").
StateNode load_torch_file(const std::string& path);
// The same for a torch.save archive that bytes [base, base + length) of `file` hold (an item of a DCP
// .distcp file); errors start with `label` ("DIR/__0_0.distcp: item 'decoder.layers.mlp.linear_fc1.weight'").
StateNode load_torch_segment(const std::string& file, const std::string& label, uint64_t base, uint64_t length);

}  // namespace tessera::ckpt
