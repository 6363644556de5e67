#include "ckpt/zip_reader.h"

#include <gtest/gtest.h>

#include "ckpt/python_fixture_testing.h"

namespace tessera::ckpt {
namespace {

using testing::FixtureDir;

std::string read_entry(const ZipReader& z, const std::string& name) { return z.read_all(z.entry(name)); }

// Python's zipfile writes stored entries, one with a zip64 local header (force_zip64), one deflated.
const char* kZipScript = R"(
import sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(d + '/a.zip', 'w', zipfile.ZIP_STORED) as z:
    z.writestr('archive/data.pkl', b'\x80\x02K\x07.')
    z.writestr('archive/data/0', bytes(range(256)) * 3)
    z.writestr('archive/empty', b'')
    with z.open('archive/big', 'w', force_zip64=True) as f:
        f.write(b'zip64 local header' * 10)
    z.comment = b'a comment after the end record'
with zipfile.ZipFile(d + '/deflated.zip', 'w', zipfile.ZIP_DEFLATED) as z:
    z.writestr('archive/data.pkl', b'x' * 1000)
)";

TEST(ZipReaderTest, ReadsPythonZipfileArchives) {
  const std::string py = testing::find_python("");
  if (py.empty()) GTEST_SKIP() << "no python3 to write the fixture archives";
  FixtureDir dir;
  ASSERT_TRUE(dir.run_python(py, kZipScript));
  ZipReader z = ZipReader::open(dir.file("a.zip"));
  ASSERT_EQ(z.entries().size(), 4u);
  EXPECT_EQ(z.entries()[0].name, "archive/data.pkl");
  EXPECT_EQ(read_entry(z, "archive/data.pkl"), std::string("\x80\x02K\x07.", 5));
  std::string expected;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 256; ++i) expected += static_cast<char>(i);
  EXPECT_EQ(read_entry(z, "archive/data/0"), expected);
  EXPECT_EQ(read_entry(z, "archive/empty"), "");
  std::string big;
  for (int i = 0; i < 10; ++i) big += "zip64 local header";
  EXPECT_EQ(read_entry(z, "archive/big"), big);

  // Reading by offset: a slice in the middle, and a range past the end refused with the entry's name.
  char slice[4];
  z.read(z.entry("archive/data/0"), 300, slice, 4);
  EXPECT_EQ(std::string(slice, 4), expected.substr(300, 4));
  try {
    z.read(z.entry("archive/data/0"), 700, slice, 100);
    FAIL() << "read past the entry's end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'archive/data/0'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(z.entry("archive/missing"), Error);

  ZipReader d = ZipReader::open(dir.file("deflated.zip"));
  try {
    d.entry("archive/data.pkl");
    FAIL() << "a deflated entry was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'archive/data.pkl' is compressed (method 8, deflate)"), std::string::npos)
        << e.what();
  }
}

// A zip64 archive in full (sizes and offsets in zip64 extra fields, zip64 end record and locator), as
// torch.save's writer makes for files over 4 GiB, built byte by byte since Python only writes these
// records when the values overflow.
std::string zip64_archive(const std::string& name, const std::string& data) {
  std::string out;
  auto put = [&out](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(0x04034b50, 4), put(45, 2), put(0, 2), put(0, 2), put(0, 4), put(0, 4);
  put(0xffffffff, 4), put(0xffffffff, 4), put(name.size(), 2), put(20, 2);
  out += name;
  put(1, 2), put(16, 2), put(data.size(), 8), put(data.size(), 8);
  out += data;
  const uint64_t cd_offset = out.size();
  put(0x02014b50, 4), put(45, 2), put(45, 2), put(0, 2), put(0, 2), put(0, 4), put(0, 4);
  put(0xffffffff, 4), put(0xffffffff, 4), put(name.size(), 2), put(28, 2), put(0, 2), put(0, 2), put(0, 2), put(0, 4);
  put(0xffffffff, 4);
  out += name;
  put(1, 2), put(24, 2), put(data.size(), 8), put(data.size(), 8), put(0, 8);
  const uint64_t cd_size = out.size() - cd_offset, z64_offset = out.size();
  put(0x06064b50, 4), put(44, 8), put(45, 2), put(45, 2), put(0, 4), put(0, 4), put(1, 8), put(1, 8);
  put(cd_size, 8), put(cd_offset, 8);
  put(0x07064b50, 4), put(0, 4), put(z64_offset, 8), put(1, 4);
  put(0x06054b50, 4), put(0, 2), put(0, 2), put(0xffff, 2), put(0xffff, 2), put(0xffffffff, 4), put(0xffffffff, 4);
  put(0, 2);
  return out;
}

TEST(ZipReaderTest, ReadsZip64RecordsAndExtraFields) {
  FixtureDir dir;
  testing::write_file_bytes(dir.file("z64.zip"), zip64_archive("archive/data/7", "sixteen bytes!!!"));
  ZipReader z = ZipReader::open(dir.file("z64.zip"));
  ASSERT_EQ(z.entries().size(), 1u);
  EXPECT_EQ(z.entries()[0].size, 16u);
  EXPECT_EQ(read_entry(z, "archive/data/7"), "sixteen bytes!!!");
}

// Every truncation and every single-byte corruption of a valid archive is read or refused with an
// Error naming the file: never a crash or a read outside the file.
TEST(ZipReaderTest, TruncatedAndCorruptedArchivesAreErrors) {
  FixtureDir dir;
  const std::string good = zip64_archive("archive/data.pkl", "payload");
  const std::string path = dir.file("bad.zip");
  int refused = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    testing::write_file_bytes(path, good.substr(0, n));
    try {
      ZipReader::open(path);
      ADD_FAILURE() << "a truncation to " << n << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      ++refused;
    }
  }
  EXPECT_EQ(refused, static_cast<int>(good.size()));
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    testing::write_file_bytes(path, bad);
    try {
      ZipReader z = ZipReader::open(path);
      for (const ZipEntry& e : z.entries()) (void)z.read_all(z.entry(e.name));
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  // Two specific diagnoses.
  testing::write_file_bytes(path, std::string(100, 'x'));
  EXPECT_THROW(ZipReader::open(path), Error);
  try {
    ZipReader::open(dir.file("missing.zip"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::ckpt
