// How many bytes of text a run of scored tokens stands for: the denominator of bits per byte, a loss
// that does not depend on the tokenizer (a model with a larger vocabulary predicts more bytes per token).
#pragma once

#include <cstdint>
#include <span>

#include "data/tokenizer.h"

namespace tessera::data {

// The UTF-8 bytes of the tokens of `ids` whose `weights` entry is positive. Each maximal run of such
// tokens is decoded as one piece of text (so merged bytes and leading spaces come out as in the
// document), and each end-of-document token counts as one byte, the separator between documents.
// Where a run starts inside a word, SentencePiece drops the run's first space: the count may be low
// by one byte per run, which makes bits per byte err high, never low.
int64_t text_bytes(const Tokenizer& tokenizer, std::span<const int32_t> ids, std::span<const float> weights);

}  // namespace tessera::data
