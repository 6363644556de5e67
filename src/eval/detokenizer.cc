#include "eval/detokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/check.h"

namespace tessera::eval {
namespace {

// Python's str.replace.
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

// Python's re.sub(pattern, replacement, s) with replacement groups written $1 (PCRE2's syntax).
void regex_replace_all(std::string& s, const char* pattern, const char* replacement) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code(
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &error,
                    &offset, nullptr),
      pcre2_code_free);
  TESSERA_CHECK(code != nullptr, "detokenizer: bad pattern ", pattern);
  std::string out(s.size() + 64, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    PCRE2_SIZE length = out.size();
    int rc = pcre2_substitute(code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                              PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH, nullptr, nullptr,
                              reinterpret_cast<PCRE2_SPTR>(replacement), PCRE2_ZERO_TERMINATED,
                              reinterpret_cast<PCRE2_UCHAR*>(out.data()), &length);
    if (rc >= 0) {
      out.resize(length);
      s = std::move(out);
      return;
    }
    TESSERA_CHECK(rc == PCRE2_ERROR_NOMEMORY, "detokenizer: the text is not valid UTF-8 (PCRE2 error ", rc, ")");
    out.assign(length, '\0');  // the length it needs
  }
  TESSERA_CHECK(false, "detokenizer: substitution did not fit");
}

}  // namespace

std::string wikitext_detokenize(std::string s) {
  // contractions
  replace_all(s, "s '", "s'");
  regex_replace_all(s, R"(/' [0-9]/)", R"(/'[0-9]/)");
  // number separators
  replace_all(s, " @-@ ", "-");
  replace_all(s, " @,@ ", ",");
  replace_all(s, " @.@ ", ".");
  // punctuation
  replace_all(s, " : ", ": ");
  replace_all(s, " ; ", "; ");
  replace_all(s, " . ", ". ");
  replace_all(s, " ! ", "! ");
  replace_all(s, " ? ", "? ");
  replace_all(s, " , ", ", ");
  // double brackets
  regex_replace_all(s, R"(\(\s*([^\)]*?)\s*\))", "($1)");
  regex_replace_all(s, R"(\[\s*([^\]]*?)\s*\])", "[$1]");
  regex_replace_all(s, R"({\s*([^}]*?)\s*})", "{$1}");
  regex_replace_all(s, R"(\"\s*([^\"]*?)\s*\")", "\"$1\"");
  regex_replace_all(s, R"('\s*([^']*?)\s*')", "'$1'");
  // miscellaneous
  replace_all(s, "= = = =", "====");
  replace_all(s, "= = =", "===");
  replace_all(s, "= =", "==");
  replace_all(s, " \u00b0 ", "\u00b0");
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " N ", " 1 ");
  replace_all(s, " 's", "'s");
  return s;
}

std::string ptb_detokenize(std::string s) {
  replace_all(s, " '", "'");
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " n't", "n't");
  replace_all(s, " N ", "1 ");
  replace_all(s, "$ 1", "$1");
  replace_all(s, "# 1", "#1");
  return s;
}

std::string detokenize_for_path(const std::string& path, std::string text) {
  if (path.find("ptb") != std::string::npos) return ptb_detokenize(std::move(text));
  if (path.find("wiki") != std::string::npos) return wikitext_detokenize(std::move(text));
  return lambada_detokenize(std::move(text));
}

}  // namespace tessera::eval
