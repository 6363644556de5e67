// libFuzzer target: the checkpoint index parser (and the resharding plan of each slice it accepts) on
// arbitrary text. Any input must give a validated index or a tessera::Error, never a crash.
// Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <string>

#include "ckpt/checkpoint_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::ckpt;
  try {
    CheckpointIndex index = parse_checkpoint_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const auto& [name, tensor] : index.tensors)
      for (const SavedSlice& s : tensor.slices) {
        // Plan copying every accepted slice into the whole tensor and into the first slice (as a
        // load would); small tensors only, so one input stays fast.
        if (tensor.slices.front().box.numel() > 100000 || s.box.numel() > 100000) continue;
        (void)copied_elements(plan_copy(s.box, Box::whole(tensor.global_shape)));
        (void)copied_elements(plan_copy(s.box, tensor.slices.front().box));
      }
  } catch (const tessera::Error&) {
  }
  return 0;
}
