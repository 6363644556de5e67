// libFuzzer target: ckpt::parse_pickle on arbitrary bytes, persistent ids resolved to a placeholder.
// Any input must give a value tree or a tessera::Error naming the input and the byte; a crash, a
// sanitizer report (a leak included: the memo makes cycles, which the arena must free) or another
// exception is a bug. Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <string_view>

#include "ckpt/pickle_reader.h"
#include "core/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera::ckpt::PyValue;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    tessera::ckpt::Pickle p = tessera::ckpt::parse_pickle(
        bytes, "fuzz.pkl", [](tessera::ckpt::Pickle& pk, const PyValue&) { return pk.make(PyValue::Kind::None); });
    // Walk what was made the way readers do: render it (depth-bounded) and classify each object.
    (void)tessera::ckpt::py_repr(p.root(), 6);
    if (p.root().is(PyValue::Kind::Object)) (void)tessera::ckpt::classify(p.root().text);
    (void)p.root().get("model");
  } catch (const tessera::Error&) {
  }
  return 0;
}
