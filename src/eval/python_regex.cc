#include "eval/python_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/check.h"

namespace tessera::eval {
namespace {

using Code = std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)>;

// Patterns are compiled once (they are string literals of the callers).
const pcre2_code* compiled(const char* pattern) {
  static std::mutex mutex;
  static std::map<std::string, Code> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(pattern);
  if (it != cache.end()) return it->second.get();
  int error = 0;
  PCRE2_SIZE offset = 0;
  Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &error,
                          &offset, nullptr),
            pcre2_code_free);
  TESSERA_CHECK(code != nullptr, "regex_sub: bad pattern ", pattern);
  return cache.emplace(pattern, std::move(code)).first->second.get();
}

}  // namespace

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(s.size());
  size_t start = 0, at;
  while ((at = s.find(from, start)) != std::string::npos) {
    out.append(s, start, at - start).append(to);
    start = at + from.size();
  }
  out.append(s, start, std::string::npos);
  s = std::move(out);
}

void regex_sub(std::string& s, const char* pattern, const char* replacement) {
  const pcre2_code* code = compiled(pattern);
  std::string out(s.size() + 64, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    PCRE2_SIZE length = out.size();
    int rc = pcre2_substitute(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                              PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH, nullptr, nullptr,
                              reinterpret_cast<PCRE2_SPTR>(replacement), PCRE2_ZERO_TERMINATED,
                              reinterpret_cast<PCRE2_UCHAR*>(out.data()), &length);
    if (rc >= 0) {
      out.resize(length);
      s = std::move(out);
      return;
    }
    TESSERA_CHECK(rc == PCRE2_ERROR_NOMEMORY, "regex_sub: the text is not valid UTF-8 (PCRE2 error ", rc, ")");
    out.assign(length, '\0');  // the length it needs
  }
  TESSERA_CHECK(false, "regex_sub: substitution did not fit");
}

}  // namespace tessera::eval
