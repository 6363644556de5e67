#include "ckpt/megatron_rng.h"

#include <array>
#include <cstring>
#include <vector>

#include "ckpt/torch_save.h"
#include "core/check.h"

namespace tessera::ckpt {
namespace {

constexpr int kTwisterWords = 624;  // the Mersenne Twister's state (Python's, numpy's and torch's CPU generator)

// The MT19937 reference seeding init_genrand(s), which numpy's np.random.seed(int) and torch's
// mt19937(seed) use as they are, and Python's random.seed starts from.
std::array<uint32_t, kTwisterWords> twister_seeded(uint32_t s) {
  std::array<uint32_t, kTwisterWords> mt{};
  mt[0] = s;
  for (uint32_t i = 1; i < kTwisterWords; ++i) mt[i] = 1812433253U * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
  return mt;
}

// Python's random.seed(n) for an int n >= 0: init_by_array over n's 32-bit words, least significant first.
std::array<uint32_t, kTwisterWords> python_random_seeded(uint64_t n) {
  std::vector<uint32_t> key = {static_cast<uint32_t>(n)};
  if (n >> 32) key.push_back(static_cast<uint32_t>(n >> 32));
  std::array<uint32_t, kTwisterWords> mt = twister_seeded(19650218U);
  int i = 1;
  size_t j = 0;
  for (int k = std::max<int>(kTwisterWords, static_cast<int>(key.size())); k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    if (++i >= kTwisterWords) {
      mt[0] = mt[kTwisterWords - 1];
      i = 1;
    }
    if (++j >= key.size()) j = 0;
  }
  for (int k = kTwisterWords - 1; k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    if (++i >= kTwisterWords) {
      mt[0] = mt[kTwisterWords - 1];
      i = 1;
    }
  }
  mt[0] = 0x80000000U;
  return mt;
}

template <typename T>
void rng_put(std::string& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}

// torch.get_rng_state() after torch.manual_seed(seed): PyTorch's CPUGeneratorImplState, 5056 bytes,
// little-endian: the legacy pod {uint64 the_initial_seed; int left; int seeded; uint64 next;
// uint64 state[624]; double normal_x, normal_y, normal_rho; int normal_is_valid} (5048 with its padding),
// then float next_float_normal_sample and bool is_next_float_normal_sample_valid. A fresh mt19937 has
// left 1, seeded 1, next 0 and no cached normal sample.
std::string torch_cpu_state(uint64_t seed) {
  std::string s(5056, '\0');
  rng_put<uint64_t>(s, 0, seed);
  rng_put<int32_t>(s, 8, 1);
  rng_put<int32_t>(s, 12, 1);
  rng_put<uint64_t>(s, 16, 0);
  const std::array<uint32_t, kTwisterWords> mt = twister_seeded(static_cast<uint32_t>(seed));
  for (int i = 0; i < kTwisterWords; ++i) rng_put<uint64_t>(s, 24 + 8 * static_cast<size_t>(i), mt[i]);
  return s;
}

// torch.cuda.get_rng_state() after torch.cuda.manual_seed(seed): the Philox seed and offset (0), 16 bytes.
std::string cuda_state(uint64_t seed) {
  std::string s(16, '\0');
  rng_put<uint64_t>(s, 0, seed);
  return s;
}

// numpy's legacy np.random.get_state() tuple after np.random.seed(seed): ('MT19937', the key as a uint32
// ndarray, pos 624, has_gauss 0, cached_gaussian 0.0). The array pickles as numpy's __reduce__ gives it:
// _reconstruct(ndarray, (0,), b'b') then BUILD (1, shape, dtype('uint32'), False, its bytes).
PickleOut numpy_state(uint32_t seed) {
  const std::array<uint32_t, kTwisterWords> mt = twister_seeded(seed);
  std::string raw(sizeof(mt), '\0');
  std::memcpy(raw.data(), mt.data(), sizeof(mt));
  PickleOut dtype = PickleOut::call_with_state(
      "numpy", "dtype", {PickleOut::str("u4"), PickleOut::boolean_of(false), PickleOut::boolean_of(true)},
      PickleOut::tuple({PickleOut::int_of(3), PickleOut::str("<"), PickleOut::none(), PickleOut::none(), PickleOut::none(),
                        PickleOut::int_of(-1), PickleOut::int_of(-1), PickleOut::int_of(0)}));
  PickleOut array = PickleOut::call_with_state(
      "numpy.core.multiarray", "_reconstruct",
      {PickleOut::global("numpy", "ndarray"), PickleOut::tuple({PickleOut::int_of(0)}), PickleOut::bytes("b")},
      PickleOut::tuple({PickleOut::int_of(1), PickleOut::tuple({PickleOut::int_of(kTwisterWords)}), std::move(dtype),
                        PickleOut::boolean_of(false), PickleOut::bytes(std::move(raw))}));
  return PickleOut::tuple({PickleOut::str("MT19937"), std::move(array), PickleOut::int_of(kTwisterWords),
                           PickleOut::int_of(0), PickleOut::float_of(0.0)});
}

// random.getstate() after random.seed(seed): (3, the 624 words and the index 624, None).
PickleOut python_state(uint64_t seed) {
  const std::array<uint32_t, kTwisterWords> mt = python_random_seeded(seed);
  std::vector<PickleOut> words;
  for (const uint32_t w : mt) words.push_back(PickleOut::int_of(w));
  words.push_back(PickleOut::int_of(kTwisterWords));
  return PickleOut::tuple({PickleOut::int_of(3), PickleOut::tuple(std::move(words)), PickleOut::none()});
}

// A uint8 tensor's bytes as torch_file reads it (widened to int32); empty when it is not one.
std::string byte_tensor_bytes(const StateNode* n) {
  if (!n || !n->is(StateNode::Kind::Tensor) || n->stored != TorchScalar::U8 || n->tensor.dtype() != DType::I32) return {};
  std::string out(static_cast<size_t>(n->tensor.numel()), '\0');
  const auto* v = static_cast<const int32_t*>(n->tensor.host_raw());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(v[i]);
  return out;
}

uint64_t rng_le64(const std::string& b, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + at, sizeof(v));
  return v;
}

}  // namespace

void read_megatron_rng_state(const StateNode* rng_state, const std::string& where, MegatronArgs& args) {
  if (!rng_state) return;
  // get_rng_state's list (data-parallel rank 0's entry first), or an older checkpoint's dict itself.
  const StateNode* first = rng_state;
  if (rng_state->is(StateNode::Kind::List) && !rng_state->items.empty()) first = &rng_state->items[0];
  const std::string cuda = byte_tensor_bytes(first->find("cuda_rng_state"));
  if (cuda.size() != 16) {
    args.notes.push_back(str_cat(where, ": rng_state has no CUDA generator state (16 bytes of torch.uint8 as "
                                 "cuda_rng_state); Tessera's seed is the args' ", args.seed));
    return;
  }
  const uint64_t seed = rng_le64(cuda, 0);
  if (args.seed >= 0 && static_cast<uint64_t>(args.seed) == seed) return;
  args.notes.push_back(str_cat(where, ": rng_state's CUDA generator was seeded with ", seed, " but the args say seed ",
                               args.seed, " (a run resumed with another --seed keeps its first generators); Tessera "
                               "carries the generators' seed, ", seed));
  args.seed = static_cast<int64_t>(seed);
}

PickleOut megatron_rng_state(uint64_t seed, int64_t pipeline_rank, int64_t tensor_rank, int64_t expert_rank,
                             int64_t expert_tensor_rank, TorchSaveWriter& writer) {
  // Megatron's _set_random_seed: each pipeline stage its own seed (no --data-parallel-random-init).
  const uint64_t rank_seed = seed + 100 * static_cast<uint64_t>(pipeline_rank);
  // model_parallel_cuda_manual_seed: the default CUDA generator and the tracker's three, in its order.
  PickleOut tracker = PickleOut::dict();
  tracker.set("data-parallel-rng", writer.byte_tensor(cuda_state(rank_seed)))
      .set("model-parallel-rng", writer.byte_tensor(cuda_state(rank_seed + 2718 + static_cast<uint64_t>(tensor_rank))))
      .set("expert-parallel-rng",
           writer.byte_tensor(cuda_state(rank_seed + 1024 + 100 * static_cast<uint64_t>(expert_rank) +
                                         static_cast<uint64_t>(expert_tensor_rank))));
  PickleOut state = PickleOut::dict();
  state.set("random_rng_state", python_state(rank_seed))
      .set("np_rng_state", numpy_state(static_cast<uint32_t>(rank_seed)))
      .set("torch_rng_state", writer.byte_tensor(torch_cpu_state(rank_seed)))
      .set("cuda_rng_state", writer.byte_tensor(cuda_state(rank_seed)))
      .set("rng_tracker_states", std::move(tracker));
  return PickleOut::list({std::move(state)});
}

}  // namespace tessera::ckpt
