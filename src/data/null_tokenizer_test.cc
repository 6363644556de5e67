#include "data/null_tokenizer.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "data/tokenizer_factory.h"

namespace tessera::data {
namespace {

TEST(NullTokenizer, IdsSeparatedBySpacesAsMegatron) {
  NullTokenizer t(10);
  EXPECT_EQ(t.vocab_size(), 11);
  EXPECT_EQ(t.eod(), 10);
  EXPECT_EQ(t.encode(" 3 5\n7  10"), (std::vector<int32_t>{3, 5, 7, 10}));
  std::vector<int32_t> ids{3, 5, 7};
  EXPECT_EQ(t.decode(ids), "3 5 7");
  EXPECT_THROW(t.encode("3 x"), Error);
  EXPECT_THROW(t.encode("11"), Error);
  EXPECT_THROW(t.encode("-1"), Error);
}

TEST(TokenizerFactory, NamesTheMissingFlag) {
  try {
    build_tokenizer({"GPT2BPETokenizer", "", "", "", 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab-file"), std::string::npos);
  }
  EXPECT_THROW(build_tokenizer({"BertWordPieceLowerCase", "", "", "", 0}), Error);
  EXPECT_EQ(build_tokenizer({"NullTokenizer", "", "", "", 5})->eod(), 5);
}

}  // namespace
}  // namespace tessera::data
