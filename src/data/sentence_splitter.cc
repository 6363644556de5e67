#include "data/sentence_splitter.h"

#include <algorithm>
#include <array>

namespace tessera::data {
namespace {

// Titles before a name: never the end of a sentence.
const std::unordered_set<std::string_view> kTitles = {
    "Mr",   "Mrs",  "Ms",  "Messrs", "Mme", "Mlle", "Dr",  "Prof", "Rev", "Gen", "Sen", "Rep", "Gov",
    "Lt",   "Col",  "Capt", "Sgt",   "Maj", "Adm",  "Cmdr", "Cpl", "Pvt", "Hon", "Pres", "Supt", "Msgr",
    "Fr",   "Mt",   "Ft",  "Gens",  "Sens", "Reps", "Drs", "Rt",  "Brig", "Lieut", "Comdr", "Atty", "Mmes",
    "Pfc",  "Supt", "Insp", "Det", "Sup", "Asst", "Dep", "Treas", "Sec'y", "Sgts", "Msgrs",
    // Abbreviated first names.
    "Wm", "Jas", "Chas", "Geo", "Thos", "Robt", "Benj", "Jno", "Saml", "Jos"};

// Words before a number: `No. 5`, `pp. 12-14`. Before anything else they are ordinary words.
const std::unordered_set<std::string_view> kBeforeNumber = {
    "No",  "Nos", "no",   "nos", "Vol", "Vols", "vol", "vols", "p",   "pp",  "Fig", "Figs", "fig", "figs",
    "Art", "Sec", "sec",  "Ch",  "ch",  "Chap", "Ex",  "Eq",   "Eqs", "Ref", "Refs", "Par", "par", "Op",
    "op",  "Pt",  "pt",   "Sect", "Tab", "Nr", "nr", "Pp", "Stat", "eqn", "eqns", "Eqn", "chap", "Rte", "Rt", "Hwy", "Apt", "Ps", "Ps"};

// Abbreviations that may also end a sentence: they split only before a sentence-starting word.
// Matched as written, so state names that are words (`Ill.`, `Wash.`) do not catch `ill.` or `wash.`.
const std::array kAbbreviations = {
    // Companies, names, Latin, general.
    "Inc", "Co", "Corp", "Ltd", "Bros", "Jr", "Sr", "Esq", "St", "Ave", "Blvd", "Rd", "Dept", "Univ", "Assn",
    "Ass'n", "Inst", "Natl", "Govt", "Admin", "Mfg", "Ry", "R.R", "etc", "vs", "v", "cf", "viz", "al", "approx",
    "ca", "esp", "incl", "misc", "resp", "vol", "ed", "eds", "trans", "repr", "rev", "cit", "ibid",
    "seq", "et", "dept", "div", "est", "ft", "sq", "lb", "lbs", "oz", "mi", "yd", "yds", "hr", "hrs", "min",
    "mins", "sec", "secs", "mo", "mos", "yr", "yrs", "wk", "wks", "cu", "cc", "mm", "cm", "km", "kg", "gal",
    "qt", "pt", "doz", "tel", "ext", "Etc",
    // Months and days (not the ones that are words: May, Sun, Sat, Wed).
    "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec", "Mon", "Tue", "Tues",
    "Thu", "Thur", "Thurs", "Fri",
    // US states as newspapers abbreviated them.
    "Ala", "Ariz", "Ark", "Calif", "Colo", "Conn", "Del", "Fla", "Ga", "Ida", "Ill", "Ind", "Kan", "Kans",
    "Ky", "La", "Md", "Mass", "Mich", "Minn", "Miss", "Mo", "Mont", "Neb", "Nebr", "Nev", "Okla", "Ore",
    "Oreg", "Pa", "Tenn", "Tex", "Va", "Vt", "Wash", "Wis", "Wisc", "Wyo", "Me", "Dak",
    // Titles also used after a name or alone, and other capitalised abbreviations.
    "Ph.D", "M.D", "B.A", "M.A", "Intl", "Cf", "App", "Ch", "pl", "Vs", "Viz", "Mgr", "Dist", "Sta", "Pl", "Ct", "Sq", "Hts",
};

// Capitalised function words that start sentences: the next word that lets an abbreviation, an
// initial or an acronym end a sentence.
const std::unordered_set<std::string_view> kStarters = {
    "The", "A", "An", "He", "She", "It", "They", "We", "I", "You", "This", "That", "These", "Those",
    "There", "Then", "But", "And", "Or", "So", "Yet", "In", "On", "At", "For", "From", "By", "With", "To",
    "Of", "As", "If", "When", "While", "After", "Before", "Although", "Though", "Because", "Since", "Once",
    "Now", "His", "Her", "Its", "Their", "Our", "My", "Your", "Some", "Many", "Most", "All", "Each",
    "Every", "No", "Not", "Nor", "Such", "What", "Who", "Which", "Where", "Why", "How", "Here", "Even",
    "Also", "Only", "Still", "However", "Thus", "Meanwhile", "Instead", "Moreover", "Indeed", "Yes",
    "Both", "Neither", "Either", "Another", "Other", "During", "Under", "Over", "Among", "Despite",
    "Without", "Unlike", "Like", "Let", "Do", "Does", "Did", "Is", "Are", "Was", "Were", "Has", "Have",
    "Had", "Can", "Could", "Will", "Would", "Should", "Might", "Must", "Perhaps", "Nevertheless",
    "Therefore", "Furthermore", "Besides", "Again", "Just", "Never", "Nothing", "Everyone",
    "Everything", "Someone", "Something", "Nobody", "Whether", "Until", "Unless", "Whatever", "Much",
    "More", "Few", "Several", "Any", "Very", "Too", "Well", "Oh", "Two", "Three", "Four", "Five",
    "Last", "Next", "First", "Later", "Today", "Yesterday", "Tomorrow", "Asked", "According", "Mr",
    "Mrs", "Dr", "Miss"};

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
bool is_alpha(unsigned char c) { return is_upper(c) || is_lower(c); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// Byte length of a closing quote or bracket at the end of `s`, 0 if none.
size_t closer_at_back(std::string_view s) {
  if (s.empty()) return 0;
  const char c = s.back();
  if (c == '"' || c == '\'' || c == ')' || c == ']' || c == '}') return 1;
  if (s.ends_with("\xE2\x80\x9D") || s.ends_with("\xE2\x80\x99")) return 3;  // ” ’
  if (s.ends_with("\xC2\xBB")) return 2;                                      // »
  return 0;
}

// Byte length of an opening quote or bracket at the start of `s`, 0 if none.
size_t opener_at_front(std::string_view s) {
  if (s.empty()) return 0;
  const char c = s.front();
  if (c == '"' || c == '\'' || c == '(' || c == '[' || c == '{' || c == '`') return 1;
  if (s.starts_with("\xE2\x80\x9C") || s.starts_with("\xE2\x80\x98")) return 3;  // “ ‘
  if (s.starts_with("\xC2\xAB")) return 2;                                        // «
  return 0;
}

std::string_view strip_closers(std::string_view s) {
  for (size_t n; (n = closer_at_back(s)) > 0;) s.remove_suffix(n);
  return s;
}
std::string_view strip_openers(std::string_view s) {
  for (size_t n; (n = opener_at_front(s)) > 0;) s.remove_prefix(n);
  return s;
}

// `3`, `1960`, `$12.50`, `(4`, `10:30`, `50%`: at least one digit, nothing but number characters.
bool is_number(std::string_view w) {
  bool digit = false;
  for (unsigned char c : w) {
    if (is_digit(c)) digit = true;
    else if (!(c == ',' || c == '.' || c == ':' || c == '/' || c == '-' || c == '%' || c == '$' || c == '#'))
      return false;
  }
  return digit;
}

// `U.S`, `N.Y`, `e.g`, `Ph.D`: letter groups of 1-3 joined by single periods (the final one cut off).
bool is_dotted_acronym(std::string_view w) {
  if (w.find('.') == std::string_view::npos) return false;
  size_t group = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const unsigned char c = w[i];
    if (is_alpha(c)) {
      if (++group > 3) return false;
    } else if (c == '.' && group > 0) {
      group = 0;
    } else {
      return false;
    }
  }
  return group > 0;
}

// Whether the token after a sentence-final mark can start a sentence: not lower case, not
// punctuation that continues a sentence. Non-ASCII letters are taken as capitals.
bool plausible_start(std::string_view next) {
  if (strip_closers(next).empty()) return false;  // a lone closing quote belongs to this sentence
  if (next.front() == '(') return true;          // `... studied. (cf. Rapoport, 1959)`
  std::string_view w = strip_openers(next);
  if (w.empty() || w.starts_with("--")) return true;  // a dash: `Paris, Texas (sp.) -- The board`
  const unsigned char c = w.front();
  return is_upper(c) || is_digit(c) || c >= 0x80 || c == '$' || c == '#';
}

// Whether the next token is a capitalised function word that starts sentences. A single capital
// followed by a period is an initial, not the word `A` or `I`.
bool is_starter(std::string_view next) {
  std::string_view w = strip_openers(next);
  size_t n = 0;
  while (n < w.size() && is_alpha(static_cast<unsigned char>(w[n]))) ++n;
  if (n == 0) return false;
  if (n == 1 && n < w.size() && w[n] == '.') return false;
  return kStarters.contains(w.substr(0, n));
}

}  // namespace

SentenceSplitter::SentenceSplitter(bool keep_newlines) : keep_newlines_(keep_newlines) {
  for (const char* a : kAbbreviations) abbreviations_.insert(a);
}

void SentenceSplitter::add_abbreviation(std::string_view word) { abbreviations_.insert(std::string(word)); }

bool SentenceSplitter::ends_sentence(std::string_view token, std::string_view next) const {
  std::string_view core = token;  // without closers (and the space before a closer token)
  for (size_t n = 1; n > 0;) {
    while (!core.empty() && is_space(static_cast<unsigned char>(core.back()))) core.remove_suffix(1);
    n = closer_at_back(core);
    core.remove_suffix(n);
  }
  if (core.empty()) return false;
  const bool ellipsis_char = core.ends_with("\xE2\x80\xA6");  // …
  const char last = core.back();
  if (!ellipsis_char && last != '.' && last != '?' && last != '!') return false;
  if (!plausible_start(next)) return false;
  if (ellipsis_char || last == '?' || last == '!') return true;
  size_t periods = 0;
  while (periods < core.size() && core[core.size() - 1 - periods] == '.') ++periods;
  std::string_view word = core.substr(0, core.size() - periods);
  if (periods >= 2) return true;  // `...`, or `Jr..`: the sentence's period after an abbreviation's
  word = strip_openers(word);
  if (word.empty()) return true;  // a period on its own
  if (word.back() == '?' || word.back() == '!') return true;
  if (is_number(word)) return true;  // `in 1960.`, and list numbers (`2. Does it ...`) stand alone
  if (const size_t dash = word.rfind('-'); dash != std::string_view::npos && dash + 1 < word.size())
    word.remove_prefix(dash + 1);  // `ex-Gov.`, `29-Oct.`
  if (kTitles.contains(word)) return false;
  const unsigned char next_first = strip_openers(next).empty() ? 0 : strip_openers(next).front();
  if (kBeforeNumber.contains(word) && is_digit(next_first)) return false;
  const bool abbreviation = abbreviations_.contains(std::string(word));
  const bool initial = word.size() == 1 && is_alpha(static_cast<unsigned char>(word[0]));
  if (abbreviation || initial || is_dotted_acronym(word)) return is_starter(next);
  return true;
}

std::vector<SentenceSpan> SentenceSplitter::spans(std::string_view text) const {
  // Tokens and, for each, whether a blank line follows it.
  struct Token {
    size_t begin, end;
    bool blank_line_after;
  };
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) ++i;
    if (i == text.size()) break;
    const size_t begin = i;
    while (i < text.size() && !is_space(static_cast<unsigned char>(text[i]))) ++i;
    const size_t end = i;
    bool blank = false;
    int newlines = 0;
    while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) {
      if (text[i] == '\n') blank = blank || ++newlines >= 2;
      else if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r') newlines = 0;
      ++i;
    }
    tokens.push_back({begin, end, blank});
  }
  std::vector<SentenceSpan> out;
  if (tokens.empty()) return out;
  auto token_at = [&](size_t t) { return text.substr(tokens[t].begin, tokens[t].end - tokens[t].begin); };
  size_t first = 0;  // first token of the current sentence
  auto close = [&](size_t last) {
    out.push_back({tokens[first].begin, tokens[last].end});
    first = last + 1;
  };
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    // A token of closing quotes and brackets alone (`however. ) There`) belongs to the token before
    // it, as punkt realigns such boundaries.
    size_t from = t;
    if (t > first && strip_closers(token_at(t)).empty()) from = t - 1;
    const std::string_view token = text.substr(tokens[from].begin, tokens[t].end - tokens[from].begin);
    if (tokens[t].blank_line_after || ends_sentence(token, token_at(t + 1))) close(t);
  }
  close(tokens.size() - 1);
  if (keep_newlines_) {
    out.front().begin = 0;
    for (size_t s = 0; s + 1 < out.size(); ++s) out[s].end = out[s + 1].begin;
  }
  return out;
}

std::vector<std::string_view> SentenceSplitter::split(std::string_view text) const {
  std::vector<std::string_view> out;
  for (const SentenceSpan& s : spans(text)) out.push_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

}  // namespace tessera::data
