#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / str_cat("tessera_safetensors_", ::getpid(), "_",
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file with the given header text (unpadded) and `data_bytes` zero bytes of data.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  write_bytes(path, le64(header.size()) + header + std::string(data_bytes, '\0'));
}

// The message of the Error that opening `path` throws, or "" if it opens.
std::string open_error(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Fills a tensor's bytes with a pattern that depends on `seed`.
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 31 + seed * 7 + 1);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST_F(SafetensorsTest, RoundTripsDtypesAndShapes) {
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w.f32", patterned({2, 3}, DType::F32, 1)},    {"w.bf16", patterned({4}, DType::BF16, 2)},
      {"w.f16", patterned({3, 1, 2}, DType::F16, 3)}, {"ids.i32", patterned({5}, DType::I32, 4)},
      {"ids.i64", patterned({2, 2}, DType::I64, 5)},  {"scalar", patterned({}, DType::F32, 6)},
      {"empty", patterned({0, 3}, DType::F32, 7)},
  };
  const std::string path = file("model.safetensors");
  write_safetensors(path, tensors);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names().size(), tensors.size());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_FALSE(f.contains("missing"));
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(f.contains(name)) << name;
    EXPECT_EQ(f.shape(name), t.shape()) << name;
    EXPECT_EQ(f.dtype(name), t.dtype()) << name;
    Tensor back = f.read(name);
    EXPECT_EQ(back.shape(), t.shape()) << name;
    EXPECT_TRUE(same_bytes(back, t)) << name;
  }
}

TEST_F(SafetensorsTest, ReadIntoFillsAnExistingView) {
  const std::string path = file("a.safetensors");
  Tensor src = patterned({2, 3}, DType::F32, 9);
  write_safetensors(path, {{"x", src}});
  Tensor big = Tensor::zeros({4, 3});
  SafetensorsFile::open(path).read_into("x", big.narrow(1, 2));
  EXPECT_EQ(big.f32()[0], 0.0f);
  EXPECT_EQ(std::memcmp(big.f32() + 3, src.f32(), 6 * sizeof(float)), 0);
  EXPECT_EQ(big.f32()[9], 0.0f);
}

TEST_F(SafetensorsTest, MetadataRoundTripsAndOverwriteReplacesFile) {
  const std::string path = file("m.safetensors");
  write_safetensors(path, {{"x", patterned({1}, DType::F32, 1)}}, {{"format", "pt"}, {"step", "100"}});
  write_safetensors(path, {{"y", patterned({2}, DType::I64, 2)}}, {{"format", "pt"}, {"step", "200"}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "200"}}));
  EXPECT_EQ(f.names(), std::vector<std::string>{"y"});
}

TEST_F(SafetensorsTest, HeaderLayoutFollowsTheSpec) {
  const std::string path = file("layout.safetensors");
  Tensor a = patterned({3}, DType::F32, 1), b = patterned({5}, DType::BF16, 2),
         c = patterned({2}, DType::I64, 3);
  write_safetensors(path, {{"a", a}, {"b", b}, {"c", c}}, {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  EXPECT_EQ(n % 8, 0u);  // padded so the data starts 8-byte aligned
  ASSERT_EQ(bytes.size(), 8 + n + 12 + 10 + 16);
  const std::string text = bytes.substr(8, n);
  EXPECT_EQ(text.front(), '{');
  EXPECT_EQ(text.find_last_not_of(' '), text.rfind('}'));  // only spaces after the JSON
  nlohmann::json h = nlohmann::json::parse(text);
  EXPECT_EQ(h["__metadata__"], nlohmann::json({{"k", "v"}}));
  EXPECT_EQ(h["a"]["dtype"], "F32");
  EXPECT_EQ(h["b"]["dtype"], "BF16");
  EXPECT_EQ(h["c"]["dtype"], "I64");
  EXPECT_EQ(h["b"]["shape"], nlohmann::json({5}));
  // Offsets are relative to the data buffer and contiguous in write order.
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json({0, 12}));
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json({12, 22}));
  EXPECT_EQ(h["c"]["data_offsets"], nlohmann::json({22, 38}));
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 12, b.raw(), 10), 0);
}

TEST_F(SafetensorsTest, WriteRejectsBadInput) {
  const std::string path = file("bad.safetensors");
  Tensor t = patterned({1}, DType::F32, 1);
  EXPECT_THROW(write_safetensors(path, {{"x", t}, {"x", t}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", t}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"x", Tensor()}}), Error);
  EXPECT_THROW(write_safetensors(file("no/such/dir/x.safetensors"), {{"x", t}}), Error);
  EXPECT_FALSE(fs::exists(path));
}

// Every malformed file is an Error naming the file and the problem, not a crash.
TEST_F(SafetensorsTest, CorruptFilesAreErrors) {
  struct Case {
    const char* name;
    std::string bytes;
    const char* expected;  // a substring of the message
  };
  auto raw = [](const std::string& header, size_t data_bytes) {
    return le64(header.size()) + header + std::string(data_bytes, '\0');
  };
  const std::vector<Case> cases = {
      {"short", "abc", "too short"},
      {"len_past_eof", le64(1000) + "{}", "past the end"},
      {"len_over_limit", le64(200'000'000) + "{}", "100 MB"},
      {"bad_json", raw("{\"a\": ", 0), "not valid JSON"},
      // A number too large for a double is nlohmann's out_of_range, not its parse_error (found by
      // safetensors_fuzzer after 440,539 executions).
      {"number_overflow", raw(R"({"a": {"dtype": "F32", "shape": [6e6666], "data_offsets": [0, 4]}})", 4),
       "not valid JSON"},
      {"not_object", raw("[1, 2]", 0), "not a JSON object"},
      {"entry_not_object", raw(R"({"a": 3})", 0), "not an object"},
      {"missing_dtype", raw(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4), "'dtype'"},
      {"missing_shape", raw(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), "'shape'"},
      {"missing_offsets", raw(R"({"a": {"dtype": "F32", "shape": [1]}})", 4), "'data_offsets'"},
      {"dtype_not_string", raw(R"({"a": {"dtype": 1, "shape": [1], "data_offsets": [0, 4]}})", 4), "'dtype'"},
      {"shape_not_array", raw(R"({"a": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4),
       "'shape'"},
      {"negative_dim", raw(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4), "shape"},
      {"float_dim", raw(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4), "shape"},
      {"huge_shape",
       raw(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4),
       "too large"},
      {"one_offset", raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
       "'data_offsets'"},
      {"negative_offset", raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4),
       "non-negative"},
      {"unknown_dtype", raw(R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8), "'F64'"},
      {"end_before_begin", raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4),
       "end before"},
      {"past_data", raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4), "run past"},
      {"size_mismatch", raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4),
       "needs 2 elements of 4 bytes"},
      {"overlap",
       raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
           8),
       "overlap"},
      {"same_range",
       raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
               "b": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
           4),
       "overlap"},
      {"gap", raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
       "belong to no tensor"},
      {"tail", raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8),
       "belong to no tensor"},
      {"metadata_not_string", raw(R"({"__metadata__": {"step": 3}})", 0), "not a string"},
  };
  for (const Case& c : cases) {
    const std::string path = file(str_cat(c.name, ".safetensors"));
    write_bytes(path, c.bytes);
    std::string msg = open_error(path);
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.name << ": " << msg;
  }

  // A valid file truncated by one byte: the last tensor now runs past the data.
  const std::string path = file("truncated.safetensors");
  write_safetensors(path, {{"x", patterned({4}, DType::F32, 1)}});
  fs::resize_file(path, fs::file_size(path) - 1);
  std::string msg = open_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;

  EXPECT_NE(open_error(file("does_not_exist")).find("does_not_exist"), std::string::npos);
}

// DeepSeek-V3's F8_E4M3 weights: one byte an element, decoded by read_fp8_e4m3 only (values from the OCP
// FP8 definition: 0x38 = 1, 0x7E = 448 the largest, 0x01 = 2^-9 the smallest subnormal, 0x7F NaN).
TEST_F(SafetensorsTest, DecodesFp8E4m3) {
  const std::string path = file("fp8.safetensors");
  const std::string header = R"({"w":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]}})";
  write_bytes(path, le64(header.size()) + header + std::string("\x38\x7e\x01\xc0\x7f\x00", 6));
  const SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_fp8_e4m3("w"));
  const Tensor t = f.read_fp8_e4m3("w");
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.host_f32()[0], 1.0f);
  EXPECT_EQ(t.host_f32()[1], 448.0f);
  EXPECT_EQ(t.host_f32()[2], std::ldexp(1.0f, -9));
  EXPECT_EQ(t.host_f32()[3], -2.0f);
  EXPECT_TRUE(std::isnan(t.host_f32()[4]));
  EXPECT_EQ(t.host_f32()[5], 0.0f);
  try {
    f.read("w");
    ADD_FAILURE() << "read() of an F8_E4M3 tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only read_fp8_e4m3 reads"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, EmptyHeaderObjectIsAValidEmptyFile) {
  const std::string path = file("empty.safetensors");
  write_raw(path, "{}", 0);
  EXPECT_TRUE(SafetensorsFile::open(path).names().empty());
  write_safetensors(path, {});
  EXPECT_TRUE(SafetensorsFile::open(path).names().empty());
}

TEST_F(SafetensorsTest, LookupErrorsNameTensorFileAndShapes) {
  const std::string path = file("lookup.safetensors");
  write_safetensors(path, {{"x", patterned({2, 3}, DType::F32, 1)}});
  SafetensorsFile f = SafetensorsFile::open(path);
  try {
    f.read("nope");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
  }
  EXPECT_THROW(f.shape("nope"), Error);
  try {
    f.read_into("x", Tensor::empty({3, 2}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  }
  EXPECT_THROW(f.read_into("x", Tensor::empty({2, 3}, DType::BF16)), Error);
}

}  // namespace
}  // namespace tessera::ckpt
