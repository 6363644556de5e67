// A rule-based English sentence splitter in the manner of NLTK's punkt, for
// `tessera preprocess --split-sentences` (Megatron splits with punkt's trained English model, which is
// not available here). It needs no training and keeps no state between calls, so one splitter serves
// every preprocessing thread.
//
// The text is read as whitespace-separated tokens; a boundary can only fall between two tokens:
//  1. A blank line (two newlines with only spaces or tabs between) always ends a sentence, as it ends
//     a paragraph (punkt does not do this: it would join a heading to the next sentence).
//  2. Otherwise a token ends a sentence only when it ends in `.`, `?`, `!` or an ellipsis (`...`, `…`),
//     or a run of them (`?!`, `!!`, `..`), followed only by closing quotes and brackets
//     (`" ' ) ] } ” ’ »`), and the next token, after opening quotes and brackets (`" ' ( [ { “ ‘ «`),
//     starts with a capital, a digit, `$`, `#`, a dash `--` or a non-ASCII letter, or is a
//     parenthesis (`studied. (cf. Rapoport)`). A token of closers alone (`however. ) There`) belongs to
//     the sentence before it, as punkt realigns such boundaries.
//  3. `?`, `!` and ellipses end a sentence under rule 2 alone. So does `..`: a period after an
//     abbreviation's own (`Jr..`).
//  4. A word before a single period decides:
//     - titles that precede a name never end a sentence (Mr. Mrs. Dr. Prof. Gen. Sen. Rev. ...);
//     - `No. Nos. Vol. p. pp. Fig. Art. Sec. Ch. ...` before a number do not;
//     - known abbreviations (etc. Inc. Co. Corp. Jr. vs. e.g. i.e. a.m. months, days, US states, units
//       ...), single letters (initials: `J. F. Kennedy`) and dotted acronyms (`U.S.`, `N.Y.`) end a
//       sentence only when the next word is one that starts sentences (The, He, It, But, In, ...:
//       a closed list of capitalised function words), so `U.S. Steel` stays whole and `in the
//       U.S. The` splits;
//     - a number (`1960.`, `3.5.`) ends a sentence; so a list number (`2. Does it`) stands alone, as in
//       punkt and in the Brown corpus's own segmentation;
//     - after a hyphen the last part decides (`ex-Gov. Knight`, `Sept. 29-Oct. 8`);
//     - any other word ends the sentence.
//  Numbers with a decimal point (`3.5`), and periods inside tokens (`e.g.,`, `www.x.org`), never split
//  since a boundary needs whitespace after the punctuation.
// Limits: an abbreviation outside the lists followed by a capitalised word splits (`McN. Hester`); a
// sentence that ends with an abbreviation, initial or acronym followed by a name or a word outside the
// starter list does not split (`et al. Spahn`), and one followed by a starter splits even inside a
// sentence (`9:00 a.m. I had`); a sentence that starts in lower case does not split; sentences that end
// without punctuation (headlines) split only at blank lines; non-ASCII letters count as capitals.
// English only. BENCHMARKS.md ("Sentence splitting for BERT") measures it on the Brown corpus.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace tessera::data {

struct SentenceSpan {
  size_t begin = 0, end = 0;  // byte offsets [begin, end) into the text
};

class SentenceSplitter {
 public:
  // keep_newlines (Megatron's --keep-newlines): each sentence keeps the whitespace, newlines
  // included, up to the next sentence (the first also what precedes it), as punkt with Megatron's
  // CustomLanguageVars does; otherwise sentences are trimmed of surrounding whitespace. Either way
  // the text's trailing whitespace is dropped.
  explicit SentenceSplitter(bool keep_newlines = false);

  // The sentences of `text` in order, none empty; whitespace-only text has none.
  std::vector<SentenceSpan> spans(std::string_view text) const;
  std::vector<std::string_view> split(std::string_view text) const;

  // Adds a word (without its final period, e.g. "Capt" or "approx") to the abbreviations that end a
  // sentence only before a sentence-starting word.
  void add_abbreviation(std::string_view word);
  bool keep_newlines() const { return keep_newlines_; }

 private:
  // Whether `token` (with a following token of closers alone joined to it) ends a sentence before `next`.
  bool ends_sentence(std::string_view token, std::string_view next) const;

  bool keep_newlines_;
  std::unordered_set<std::string> abbreviations_;
};

}  // namespace tessera::data
