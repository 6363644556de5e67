#include "data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "data/gpt_dataset_testing.h"
#include "core/testing.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using testing::read_file_bytes;
using testing::run_reference;
using testing::ScratchDir;
using testing::shell_quote;
using testing::write_file_bytes;

// A document is a list of sequences (usually one).
using Document = std::vector<std::vector<int32_t>>;

// ---- an independent writer: the bytes packed by hand from the format's description ----

template <typename T>
void put_le(std::string& out, T value, size_t bytes = sizeof(T)) {
  uint64_t v = 0;
  std::memcpy(&v, &value, sizeof(T));
  for (size_t i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

struct Packed {
  std::string idx, bin;
};

Packed pack(const std::vector<Document>& docs, TokenDType dtype) {
  std::vector<int64_t> lengths, doc_index{0};
  Packed p;
  for (const Document& doc : docs) {
    for (const auto& seq : doc) {
      lengths.push_back(static_cast<int64_t>(seq.size()));
      for (int32_t t : seq) {
        switch (dtype) {
          case TokenDType::kUInt8: put_le(p.bin, static_cast<uint8_t>(t)); break;
          case TokenDType::kUInt16: put_le(p.bin, static_cast<uint16_t>(t)); break;
          case TokenDType::kInt32: put_le(p.bin, t); break;
          case TokenDType::kInt64: put_le(p.bin, static_cast<int64_t>(t)); break;
          default: ADD_FAILURE() << "dtype not packed by this test";
        }
      }
    }
    doc_index.push_back(static_cast<int64_t>(lengths.size()));
  }
  p.idx = std::string("MMIDIDX\0\0", 9);
  put_le<uint64_t>(p.idx, 1);
  p.idx += static_cast<char>(dtype);
  put_le<uint64_t>(p.idx, lengths.size());
  put_le<uint64_t>(p.idx, doc_index.size());
  for (int64_t len : lengths) put_le<int32_t>(p.idx, static_cast<int32_t>(len));
  int64_t pointer = 0;
  for (int64_t len : lengths) {
    put_le<int64_t>(p.idx, pointer);
    pointer += len * static_cast<int64_t>(dtype_size(dtype));
  }
  for (int64_t d : doc_index) put_le<int64_t>(p.idx, d);
  return p;
}

void build(const std::string& prefix, const std::vector<Document>& docs, TokenDType dtype) {
  IndexedDatasetBuilder builder(prefix, dtype);
  for (const Document& doc : docs) {
    if (doc.size() == 1 && !doc[0].empty()) {
      builder.add_document(doc[0]);
    } else {
      for (const auto& seq : doc) builder.add_item(seq);
      builder.end_document();
    }
  }
  builder.finalize();
}

// Documents with the awkward cases: empty sequences, a document of several sequences, a
// document of none.
std::vector<Document> sample_docs(int32_t max_token) {
  std::vector<Document> docs;
  uint32_t x = 12345;
  auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return x >> 8;
  };
  for (int d = 0; d < 40; ++d) {
    Document doc;
    const int seqs = d == 7 ? 3 : d == 11 ? 0 : 1;
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> seq(d == 5 ? 0 : next() % 50);
      for (int32_t& t : seq) t = static_cast<int32_t>(next() % static_cast<uint32_t>(max_token));
      doc.push_back(seq);
    }
    docs.push_back(doc);
  }
  return docs;
}

using ::tessera::testing::error_of;

TEST(IndexedDataset, BestDtypeFollowsPreprocess) {
  EXPECT_EQ(best_dtype(50257), TokenDType::kUInt16);
  EXPECT_EQ(best_dtype(65499), TokenDType::kUInt16);
  EXPECT_EQ(best_dtype(65500), TokenDType::kInt32);
  EXPECT_EQ(best_dtype(128256), TokenDType::kInt32);
  EXPECT_EQ(dtype_size(TokenDType::kUInt16), 2u);
  EXPECT_STREQ(dtype_name(TokenDType::kFloat32), "float32");
}

TEST(IndexedDataset, BuilderBytesEqualHandPackedBytes) {
  for (TokenDType dtype : {TokenDType::kUInt8, TokenDType::kUInt16, TokenDType::kInt32, TokenDType::kInt64}) {
    ScratchDir dir;
    const auto docs = sample_docs(dtype == TokenDType::kUInt8 ? 256 : 60000);
    build(dir / "d", docs, dtype);
    const Packed expected = pack(docs, dtype);
    EXPECT_EQ(read_file_bytes(dir / "d.idx"), expected.idx) << dtype_name(dtype);
    EXPECT_EQ(read_file_bytes(dir / "d.bin"), expected.bin) << dtype_name(dtype);
  }
}

TEST(IndexedDataset, BuilderBytesEqualMegatronWriterBytes) {
  for (const char* dtype : {"uint16", "int32"}) {
    ScratchDir dir;
    const auto docs = sample_docs(60000);
    nlohmann::json j = docs;
    write_file_bytes(dir / "docs.json", j.dump());
    ASSERT_EQ(run_reference(str_cat("write --dtype ", dtype, " --docs ", shell_quote(dir / "docs.json"), " --prefix ",
                                    shell_quote(dir / "megatron")),
                            dir.path()),
              "");
    build(dir / "ours", docs, std::string(dtype) == "uint16" ? TokenDType::kUInt16 : TokenDType::kInt32);
    EXPECT_EQ(read_file_bytes(dir / "ours.idx"), read_file_bytes(dir / "megatron.idx")) << dtype;
    EXPECT_EQ(read_file_bytes(dir / "ours.bin"), read_file_bytes(dir / "megatron.bin")) << dtype;
  }
}

TEST(IndexedDataset, ReaderReadsHandPackedFiles) {
  ScratchDir dir;
  const auto docs = sample_docs(60000);
  const Packed p = pack(docs, TokenDType::kUInt16);
  write_file_bytes(dir / "d.idx", p.idx);
  write_file_bytes(dir / "d.bin", p.bin);
  IndexedDataset ds(dir / "d");
  EXPECT_EQ(ds.dtype(), TokenDType::kUInt16);
  EXPECT_EQ(ds.num_documents(), static_cast<int64_t>(docs.size()));
  std::vector<int64_t> doc_index{0};
  int64_t seq = 0, tokens = 0;
  for (const Document& doc : docs) {
    for (const auto& s : doc) {
      ASSERT_EQ(ds.sequence_length(seq), static_cast<int32_t>(s.size()));
      EXPECT_EQ(ds.get(seq), s);
      if (s.size() >= 3) {
        EXPECT_EQ(ds.get(seq, 1, 2), std::vector<int32_t>(s.begin() + 1, s.begin() + 3));
        EXPECT_EQ(ds.get(seq, 2), std::vector<int32_t>(s.begin() + 2, s.end()));
      }
      ++seq;
      tokens += static_cast<int64_t>(s.size());
    }
    doc_index.push_back(seq);
  }
  EXPECT_EQ(ds.num_sequences(), seq);
  EXPECT_EQ(ds.num_tokens(), tokens);
  EXPECT_EQ(ds.document_indices(), doc_index);
  EXPECT_EQ(ds.sequence_lengths().size(), static_cast<size_t>(seq));
}

TEST(IndexedDataset, RoundTripIncludingADocumentLargerThanTheWriteBuffer) {
  ScratchDir dir;
  std::vector<int32_t> big(1'500'000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>((i * 7919) % 100000);
  std::vector<int32_t> small = {1, 2, 3};
  {
    IndexedDatasetBuilder b(dir / "d", TokenDType::kInt32);
    b.add_document(small);
    b.add_document(big);
    std::vector<int32_t> two = {9, 8, 7, 6};
    std::vector<int64_t> lens = {1, 3};
    b.add_document(two, lens);
    EXPECT_EQ(b.num_sequences(), 4);
    EXPECT_EQ(b.num_documents(), 3);
    b.finalize();
  }
  IndexedDataset ds(dir / "d");
  EXPECT_EQ(ds.get(0), small);
  EXPECT_EQ(ds.get(1), big);
  EXPECT_EQ(ds.get(2), (std::vector<int32_t>{9}));
  EXPECT_EQ(ds.get(3), (std::vector<int32_t>{8, 7, 6}));
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 1, 2, 4}));
}

TEST(IndexedDataset, EmptyDocumentHasNoSequencesAsInPreprocess) {
  ScratchDir dir;
  {
    IndexedDatasetBuilder b(dir / "d", TokenDType::kUInt16);
    std::vector<int32_t> one = {5}, none;
    b.add_document(one);
    b.add_document(none);
    b.finalize();
  }
  EXPECT_EQ(read_file_bytes(dir / "d.idx"), pack({{{5}}, {}}, TokenDType::kUInt16).idx);
  IndexedDataset ds(dir / "d");
  EXPECT_EQ(ds.num_sequences(), 1);
  EXPECT_EQ(ds.num_documents(), 2);
}

TEST(IndexedDataset, EmptyDatasetIsValid) {
  ScratchDir dir;
  IndexedDatasetBuilder(dir / "e", TokenDType::kUInt16).finalize();
  IndexedDataset ds(dir / "e");
  EXPECT_EQ(ds.num_sequences(), 0);
  EXPECT_EQ(ds.num_documents(), 0);
  EXPECT_EQ(read_file_bytes(dir / "e.idx"), pack({}, TokenDType::kUInt16).idx);
}

// A path to the .bin or .idx file where the prefix was meant: the error names the prefix to give.
TEST(IndexedDataset, AFileNameForAPrefixNamesThePrefix) {
  ScratchDir dir;
  IndexedDatasetBuilder(dir / "e", TokenDType::kUInt16).finalize();
  for (const char* file : {"e.bin", "e.idx"}) {
    try {
      IndexedDataset ds(dir / file);
      FAIL() << file << " was opened";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("(a dataset is named by its prefix, without .bin or .idx: " +
                                           (dir / "e") + ")"),
                std::string::npos)
          << e.what();
    }
  }
  try {
    IndexedDataset ds(dir / "missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("named by its prefix"), std::string::npos) << e.what();
  }
}

TEST(IndexedDataset, BuilderWritesNothingUnderTheFinalNamesUntilFinalize) {
  ScratchDir dir;
  {
    IndexedDatasetBuilder b(dir / "d", TokenDType::kUInt16);
    std::vector<int32_t> t = {1, 2};
    b.add_document(t);
    EXPECT_FALSE(fs::exists(dir / "d.bin"));
    EXPECT_FALSE(fs::exists(dir / "d.idx"));
  }  // abandoned: its temporary file is removed
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(IndexedDataset, BuilderRejectsBadInput) {
  ScratchDir dir;
  IndexedDatasetBuilder b(dir / "d", TokenDType::kUInt16);
  std::vector<int32_t> too_big = {70000};
  EXPECT_NE(error_of([&] { b.add_document(too_big); }).find("does not fit"), std::string::npos);
  std::vector<int32_t> negative = {-1};
  EXPECT_NE(error_of([&] { b.add_document(negative); }).find("does not fit"), std::string::npos);
  std::vector<int32_t> three = {1, 2, 3};
  std::vector<int64_t> lens = {1, 1};
  EXPECT_NE(error_of([&] { b.add_document(three, lens); }).find("summing to 2"), std::string::npos);
  // Rejected documents leave nothing behind.
  b.add_document(three);
  b.finalize();
  EXPECT_NE(error_of([&] { b.finalize(); }).find("already finalized"), std::string::npos);
  const Packed expected = pack({{three}}, TokenDType::kUInt16);
  EXPECT_EQ(read_file_bytes(dir / "d.idx"), expected.idx);
  EXPECT_EQ(read_file_bytes(dir / "d.bin"), expected.bin);
}

class BadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    auto docs = sample_docs(60000);
    good_ = pack(docs, TokenDType::kUInt16);
  }
  // The message of the Error that opening the dataset made of these bytes throws.
  std::string open_error(const std::string& idx, const std::string& bin) {
    write_file_bytes(dir_ / "d.idx", idx);
    write_file_bytes(dir_ / "d.bin", bin);
    return error_of([&] { IndexedDataset ds(dir_ / "d"); });
  }
  ScratchDir dir_;
  Packed good_;
};

TEST_F(BadFiles, GoodBytesOpen) { EXPECT_EQ(open_error(good_.idx, good_.bin), ""); }

TEST_F(BadFiles, WrongMagic) {
  std::string idx = good_.idx;
  idx[0] = 'X';
  const std::string e = open_error(idx, good_.bin);
  EXPECT_NE(e.find(dir_ / "d.idx"), std::string::npos) << e;
  EXPECT_NE(e.find("magic"), std::string::npos) << e;
}

TEST_F(BadFiles, WrongVersion) {
  std::string idx = good_.idx;
  idx[9] = 2;
  const std::string e = open_error(idx, good_.bin);
  EXPECT_NE(e.find(dir_ / "d.idx"), std::string::npos) << e;
  EXPECT_NE(e.find("version 2"), std::string::npos) << e;
}

TEST_F(BadFiles, UnknownDtypeCode) {
  for (char code : {0, 9, 100}) {
    std::string idx = good_.idx;
    idx[17] = code;
    const std::string e = open_error(idx, good_.bin);
    EXPECT_NE(e.find(str_cat("unknown dtype code ", static_cast<int>(code))), std::string::npos) << e;
  }
}

TEST_F(BadFiles, TruncatedIndex) {
  // Inside the magic, inside the header, inside each array.
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, size_t{34}, size_t{40}, good_.idx.size() - 1}) {
    const std::string e = open_error(good_.idx.substr(0, cut), good_.bin);
    EXPECT_NE(e.find(dir_ / "d.idx"), std::string::npos) << cut << ": " << e;
    EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("magic") != std::string::npos) << cut << ": " << e;
  }
}

TEST_F(BadFiles, TrailingGarbageInIndex) {
  const std::string e = open_error(good_.idx + "xyz", good_.bin);
  EXPECT_NE(e.find("does not match the header"), std::string::npos) << e;
}

TEST_F(BadFiles, BinShorterThanThePointersSay) {
  const std::string e = open_error(good_.idx, good_.bin.substr(0, good_.bin.size() - 2));
  EXPECT_NE(e.find(dir_ / "d.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("too short"), std::string::npos) << e;
}

TEST_F(BadFiles, DocumentIndexNotEndingAtTheSequenceCount) {
  std::string idx = good_.idx;
  idx[idx.size() - 8] += 1;  // last document index entry, low byte
  const std::string e = open_error(idx, good_.bin);
  EXPECT_NE(e.find("document index ends"), std::string::npos) << e;
}

TEST_F(BadFiles, MissingBin) {
  write_file_bytes(dir_ / "d.idx", good_.idx);
  const std::string e = error_of([&] { IndexedDataset ds(dir_ / "d"); });
  EXPECT_NE(e.find("d.bin"), std::string::npos) << e;
}

TEST(IndexedDataset, ReadOutOfRangeIsAnError) {
  ScratchDir dir;
  build(dir / "d", {{{1, 2, 3}}}, TokenDType::kUInt16);
  IndexedDataset ds(dir / "d");
  EXPECT_NE(error_of([&] { ds.get(1); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { ds.get(0, 2, 2); }).find("out of range"), std::string::npos);
  EXPECT_EQ(ds.get(0, 3), std::vector<int32_t>{});
}

// Found by fuzz/indexed_dataset_fuzzer.cc: a float .bin value beyond int32 was cast to an id (undefined
// behaviour), and an int64 one wrapped. Both are refused; the values around them still read.
TEST(IndexedDataset, TokensOutsideInt32AreAnError) {
  ScratchDir dir;
  Packed p = pack({{{1, 2, 3}}}, TokenDType::kInt64);
  const int64_t big = int64_t{1} << 40;
  std::memcpy(p.bin.data() + 16, &big, 8);
  write_file_bytes(dir / "i.idx", p.idx);
  write_file_bytes(dir / "i.bin", p.bin);
  IndexedDataset wide(dir / "i");
  EXPECT_EQ(wide.get(0, 0, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_NE(error_of([&] { wide.get(0); }).find("i.bin: sequence 0 holds a int64 value outside the int32 range"),
            std::string::npos)
      << error_of([&] { wide.get(0); });

  for (float bad : {1.41753e13f, -3e9f, std::numeric_limits<float>::quiet_NaN()}) {
    Packed f = pack({{{1, 2, 3}}}, TokenDType::kInt32);  // 4-byte tokens; relabelled float32 below
    f.idx[17] = static_cast<char>(TokenDType::kFloat32);
    const float values[3] = {1.0f, 2.0f, bad};
    std::memcpy(f.bin.data(), values, sizeof values);
    write_file_bytes(dir / "f.idx", f.idx);
    write_file_bytes(dir / "f.bin", f.bin);
    IndexedDataset floats(dir / "f");
    EXPECT_EQ(floats.get(0, 0, 2), (std::vector<int32_t>{1, 2}));
    EXPECT_NE(error_of([&] { floats.get(0); }).find("outside the int32 range"), std::string::npos) << bad;
  }
}

TEST(IndexedDataset, MergeConcatenatesLikeMegatron) {
  ScratchDir dir;
  const auto docs = sample_docs(60000);
  const std::vector<Document> a(docs.begin(), docs.begin() + 15), b(docs.begin() + 15, docs.end());
  fs::create_directories(dir / "parts");
  build(dir / "parts/b_part", b, TokenDType::kUInt16);  // listed after a_part when sorted
  build(dir / "parts/a_part", a, TokenDType::kUInt16);
  const auto prefixes = find_dataset_prefixes(dir / "parts");
  ASSERT_EQ(prefixes, (std::vector<std::string>{dir / "parts/a_part", dir / "parts/b_part"}));
  merge_datasets(prefixes, dir / "merged");
  build(dir / "whole", docs, TokenDType::kUInt16);
  EXPECT_EQ(read_file_bytes(dir / "merged.idx"), read_file_bytes(dir / "whole.idx"));
  EXPECT_EQ(read_file_bytes(dir / "merged.bin"), read_file_bytes(dir / "whole.bin"));

  build(dir / "wide", a, TokenDType::kInt32);
  const std::string e = error_of([&] { merge_datasets({dir / "whole", dir / "wide"}, dir / "bad"); });
  EXPECT_NE(e.find("dtype int32 differs"), std::string::npos) << e;

  write_file_bytes(dir / "parts/lonely.idx", "x");
  EXPECT_NE(error_of([&] { find_dataset_prefixes(dir / "parts"); }).find("lonely.idx: no matching .bin"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::data
