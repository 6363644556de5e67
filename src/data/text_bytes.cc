#include "data/text_bytes.h"

#include "core/check.h"

namespace tessera::data {

int64_t text_bytes(const Tokenizer& tokenizer, std::span<const int32_t> ids, std::span<const float> weights) {
  TESSERA_CHECK(ids.size() == weights.size(), "text_bytes: ", ids.size(), " ids and ", weights.size(), " weights");
  const int32_t eod = tokenizer.eod();
  int64_t bytes = 0;
  size_t run_start = 0;
  auto end_run = [&](size_t end) {
    if (end > run_start) bytes += static_cast<int64_t>(tokenizer.decode(ids.subspan(run_start, end - run_start)).size());
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool text = weights[i] > 0 && ids[i] != eod;
    if (!text) {
      end_run(i);
      run_start = i + 1;
      if (weights[i] > 0) ++bytes;  // a scored end of document
    }
  }
  end_run(ids.size());
  return bytes;
}

}  // namespace tessera::data
