#include <gtest/gtest.h>
#include "data/gpt2_bpe_tokenizer.h"
TEST(Gpt2, Placeholder) {}
