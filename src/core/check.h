// Errors and checks. Every user-facing failure is a tessera::Error whose message says what was
// wrong and where; the app prints it and exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<< into one string.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

// Throws Error("PATH: message parts"): what is wrong with a file, named by its path.
template <typename... Args>
[[noreturn]] void fail_in_file(const std::string& path, const Args&... args) {
  throw Error(str_cat(path, ": ", args...));
}

}  // namespace tessera

// TESSERA_CHECK(cond, "message parts", ...) throws tessera::Error with the message when cond is false.
#define TESSERA_CHECK(cond, ...)                                     \
  do {                                                               \
    if (!(cond)) throw ::tessera::Error(::tessera::str_cat(__VA_ARGS__)); \
  } while (0)
