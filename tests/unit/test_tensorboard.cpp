#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include <trainbox/metrics/tensorboard.h>
#include <trainbox/util/errors.h>

#include "temp_dir.h"

using namespace trainbox;
using metrics::crc32c;
using metrics::masked_crc32c;
using metrics::TensorBoardWriter;
using test::TempDir;

namespace {

std::uint64_t le(const std::string& s, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

// Splits a TFRecord file into its records, verifying lengths and both CRCs; throws on any mismatch.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < file.size()) {
    if (file.size() - at < 12) throw std::runtime_error("truncated length field at " + std::to_string(at));
    const std::uint64_t len = le(file, at, 8);
    if (le(file, at + 8, 4) != masked_crc32c(file.data() + at, 8))
      throw std::runtime_error("bad length crc at " + std::to_string(at));
    if (file.size() - at - 12 < len + 4) throw std::runtime_error("truncated record at " + std::to_string(at));
    std::string data = file.substr(at + 12, len);
    if (le(file, at + 12 + len, 4) != masked_crc32c(data.data(), data.size()))
      throw std::runtime_error("bad data crc at " + std::to_string(at));
    records.push_back(std::move(data));
    at += 12 + len + 4;
  }
  return records;
}

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

}  // namespace

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283U);
  EXPECT_EQ(crc32c("", 0), 0U);
  // RFC 3720 B.4: 32 bytes of zeros.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAU);
}

TEST(Crc32c, MaskedFormula) {
  for (const std::string s : {"", "123456789", "brain.Event:2"}) {
    const std::uint32_t c = crc32c(s.data(), s.size());
    EXPECT_EQ(masked_crc32c(s.data(), s.size()), static_cast<std::uint32_t>(((c >> 15) | (c << 17)) + 0xA282EAD8U))
        << s;
  }
  // Values from TensorBoard's own implementation (tensorboard.compat.tensorflow_stub.pywrap_tensorflow).
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5U);
  EXPECT_EQ(masked_crc32c("", 0), 0xA282EAD8U);
  EXPECT_EQ(masked_crc32c("brain.Event:2", 13), 0x7C0601EEU);
}

TEST(TensorBoardWriter, RecordsFrameAndVerify) {
  TempDir dir;
  std::string path;
  {
    TensorBoardWriter tb(dir.path + "/run1");  // also creates the missing sub-directory
    path = tb.path();
    tb.add_scalar("train/loss", 0.5f, 1);
    tb.add_scalar("train/loss", 0.25f, 2);
    tb.add_scalar("eval/accuracy", 0.9f, 2);
    tb.flush();
  }
  EXPECT_TRUE(std::regex_match(std::filesystem::path(path).filename().string(),
                               std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.\d+\.trainbox)")))
      << path;
  const auto records = read_records(path);
  ASSERT_EQ(records.size(), 4U);
  // First record: wall_time (0x09 + 8 bytes) then file_version (0x1A, length 13, text).
  ASSERT_EQ(records[0].size(), 9U + 2U + 13U);
  EXPECT_EQ(records[0][0], 0x09);
  EXPECT_EQ(records[0].substr(9), bytes({0x1A, 13}) + "brain.Event:2");
  EXPECT_NE(records[3].find("eval/accuracy"), std::string::npos);
}

TEST(TensorBoardWriter, ScalarEventBytesExact) {
  TempDir dir;
  TensorBoardWriter tb(dir.path);
  tb.add_scalar("a", 1.0f, 1, 2.0);
  tb.add_scalar("a", -3.5f, -1, 2.0);  // negative int64: ten-byte varint
  const auto records = read_records(tb.path());
  ASSERT_EQ(records.size(), 3U);
  const std::string wall = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40});  // 2.0 as LE double
  // Event{wall_time, step=1, summary{value{tag="a", simple_value=1.0f}}}
  EXPECT_EQ(records[1], wall + bytes({0x10, 0x01, 0x2A, 10, 0x0A, 8, 0x0A, 1, 'a', 0x15, 0x00, 0x00, 0x80, 0x3F}));
  EXPECT_EQ(records[2], wall + bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x2A,
                                      10,   0x0A, 8,    0x0A, 1,    'a',  0x15, 0x00, 0x00, 0x60, 0xC0}));
}

TEST(TensorBoardWriter, ScalarsReachTheFileBeforeFlush) {
  TempDir dir;
  TensorBoardWriter tb(dir.path);
  tb.add_scalar("x", 1.0f, 7);
  EXPECT_EQ(read_records(tb.path()).size(), 2U);  // no flush(): the file already holds both records
}

TEST(TensorBoardWriter, SecondWriterSameDirGetsItsOwnFile) {
  TempDir dir;
  TensorBoardWriter a(dir.path);
  a.add_scalar("x", 1.0f, 1);
  TensorBoardWriter b(dir.path);
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(read_records(a.path()).size(), 2U);
  EXPECT_EQ(read_records(b.path()).size(), 1U);
}

TEST(TensorBoardWriter, MoveKeepsTheFile) {
  TempDir dir;
  TensorBoardWriter a(dir.path);
  const std::string path = a.path();
  TensorBoardWriter b(std::move(a));
  b.add_scalar("x", 2.0f, 3);
  EXPECT_EQ(b.path(), path);
  EXPECT_EQ(read_records(path).size(), 2U);
}

TEST(TensorBoardWriter, UnwritableDirThrowsSystemError) {
  try {
    TensorBoardWriter tb("/proc/nope");
    FAIL() << "expected SystemError, created " << tb.path();
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/nope"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("errno"), std::string::npos) << e.what();
  }
}
