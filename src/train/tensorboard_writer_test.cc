#include "train/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/check.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

// --- An independent minimal reader, so the test does not just mirror the writer's code. ---

// Bit-at-a-time CRC-32C: slow, but obviously the textbook definition.
uint32_t reference_crc32c(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : s) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}

uint32_t reference_masked(const std::string& s) {
  uint32_t c = reference_crc32c(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

template <typename T>
T load_le(const std::string& s, size_t pos) {
  T v{};
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<T>(static_cast<unsigned char>(s.at(pos + i))) << (8 * i));
  }
  return v;
}

// Splits a TFRecord stream into records, checking both CRCs of each.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    EXPECT_GE(bytes.size() - pos, 12u) << "truncated record header";
    uint64_t len = load_le<uint64_t>(bytes, pos);
    EXPECT_EQ(load_le<uint32_t>(bytes, pos + 8), reference_masked(bytes.substr(pos, 8))) << "length crc";
    EXPECT_GE(bytes.size() - pos - 12, len + 4) << "truncated record";
    std::string data = bytes.substr(pos + 12, len);
    EXPECT_EQ(load_le<uint32_t>(bytes, pos + 12 + len), reference_masked(data)) << "data crc";
    records.push_back(data);
    pos += 12 + len + 4;
  }
  return records;
}

struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t scalar = 0;  // varint, fixed64 or fixed32 payload
  std::string bytes;    // length-delimited payload
};

uint64_t read_varint(const std::string& s, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    unsigned char b = static_cast<unsigned char>(s.at((*pos)++));
    v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return v;
  }
}

std::vector<Field> parse_message(const std::string& s) {
  std::vector<Field> fields;
  size_t pos = 0;
  while (pos < s.size()) {
    uint64_t key = read_varint(s, &pos);
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    switch (f.wire_type) {
      case 0:
        f.scalar = read_varint(s, &pos);
        break;
      case 1:
        f.scalar = load_le<uint64_t>(s, pos), pos += 8;
        break;
      case 5:
        f.scalar = load_le<uint32_t>(s, pos), pos += 4;
        break;
      case 2: {
        uint64_t len = read_varint(s, &pos);
        f.bytes = s.substr(pos, len);
        pos += len;
        break;
      }
      default:
        ADD_FAILURE() << "unexpected wire type " << f.wire_type;
        return fields;
    }
    fields.push_back(f);
  }
  return fields;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
};

Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : parse_message(data)) {
    if (f.number == 1 && f.wire_type == 1) {
      std::memcpy(&e.wall_time, &f.scalar, 8);
    } else if (f.number == 2 && f.wire_type == 0) {
      e.step = static_cast<int64_t>(f.scalar);
    } else if (f.number == 3 && f.wire_type == 2) {
      e.file_version = f.bytes;
    } else if (f.number == 5 && f.wire_type == 2) {
      for (const Field& value : parse_message(f.bytes)) {
        EXPECT_EQ(value.number, 1u);
        std::pair<std::string, float> tv;
        for (const Field& vf : parse_message(value.bytes)) {
          if (vf.number == 1 && vf.wire_type == 2) tv.first = vf.bytes;
          if (vf.number == 2 && vf.wire_type == 5) {
            uint32_t bits = static_cast<uint32_t>(vf.scalar);
            std::memcpy(&tv.second, &bits, 4);
          }
        }
        e.values.push_back(tv);
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.number;
    }
  }
  return e;
}

std::vector<Event> read_events(const std::string& path) {
  std::vector<Event> events;
  for (const std::string& r : read_records(path)) events.push_back(decode_event(r));
  return events;
}

class TensorBoardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / str_cat("tessera_tb_", ::getpid(), "_",
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4 test vector
  for (const std::string& s : {std::string("a"), std::string("hello, tensorboard"), zeros}) {
    EXPECT_EQ(crc32c(s.data(), s.size()), reference_crc32c(s)) << s;
    EXPECT_EQ(masked_crc32c(s.data(), s.size()), reference_masked(s)) << s;
  }
}

TEST_F(TensorBoardWriterTest, WritesDecodableScalarEvents) {
  const fs::path log_dir = dir_ / "nested" / "run1";  // created by the writer
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string long_tag(200, 't');  // length needs a two-byte varint
  std::string path;
  {
    TensorBoardWriter w(log_dir.string());
    path = w.path();
    EXPECT_EQ(fs::path(path).parent_path(), log_dir);
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
    w.add_scalar("train/loss", 2.5f, 1);
    w.add_scalar("train/loss", 1.25f, 2);
    w.flush();
    EXPECT_EQ(read_events(path).size(), 3u);  // flush() put the records on disk
    w.add_scalar("train/lr", 3e-4f, 2);
    w.add_scalar(long_tag, -7.0f, int64_t{1} << 40);
    w.add_scalar("neg", 0.5f, -3);
  }  // the destructor writes the rest

  std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].values.empty());
  const double after =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const Event& e : events) {
    EXPECT_GE(e.wall_time, before - 1);
    EXPECT_LE(e.wall_time, after + 1);
  }
  struct Expected {
    std::string tag;
    float value;
    int64_t step;
  };
  const std::vector<Expected> expected = {{"train/loss", 2.5f, 1},
                                          {"train/loss", 1.25f, 2},
                                          {"train/lr", 3e-4f, 2},
                                          {long_tag, -7.0f, int64_t{1} << 40},
                                          {"neg", 0.5f, -3}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const Event& e = events[i + 1];
    EXPECT_EQ(e.step, expected[i].step) << i;
    EXPECT_TRUE(e.file_version.empty()) << i;
    ASSERT_EQ(e.values.size(), 1u) << i;
    EXPECT_EQ(e.values[0].first, expected[i].tag) << i;
    EXPECT_EQ(e.values[0].second, expected[i].value) << i;
  }
}

TEST_F(TensorBoardWriterTest, WritersInTheSameDirectoryUseSeparateFiles) {
  TensorBoardWriter a(dir_.string()), b(dir_.string());
  EXPECT_NE(a.path(), b.path());
  a.add_scalar("x", 1.0f, 1);
  b.add_scalar("x", 2.0f, 1);
  a.flush();
  b.flush();
  EXPECT_EQ(read_events(a.path()).back().values.at(0).second, 1.0f);
  EXPECT_EQ(read_events(b.path()).back().values.at(0).second, 2.0f);
}

TEST_F(TensorBoardWriterTest, UnwritableDirectoryIsAnError) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  try {
    TensorBoardWriter w((dir_ / "file" / "sub").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file/sub"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::train
