#include "eval/detokenizer.h"

#include "eval/python_regex.h"

namespace tessera::eval {

std::string wikitext_detokenize(std::string s) {
  // contractions
  replace_all(s, "s '", "s'");
  regex_sub(s, R"(/' [0-9]/)", R"(/'[0-9]/)");
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
  regex_sub(s, R"(\(\s*([^\)]*?)\s*\))", "($1)");
  regex_sub(s, R"(\[\s*([^\]]*?)\s*\])", "[$1]");
  regex_sub(s, R"({\s*([^}]*?)\s*})", "{$1}");
  regex_sub(s, R"(\"\s*([^\"]*?)\s*\")", "\"$1\"");
  regex_sub(s, R"('\s*([^']*?)\s*')", "'$1'");
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
