#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <trainbox/io/safetensors.h>
#include <trainbox/util/errors.h>

#include "temp_dir.h"

using namespace trainbox;
using io::DType;
using io::read_safetensors_header;
using io::TensorView;
using io::write_safetensors;
using test::TempDir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

// A raw file: 8-byte LE size, the header text as given, then `buffer`.
std::string raw_file(const std::string& header, const std::string& buffer) {
  std::string s(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s + header + buffer;
}

std::uint64_t header_size(const std::string& file) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(file[i])} << (8 * i);
  return n;
}

// The reader must throw DataError mentioning the path and `needle`.
void expect_data_error(const TempDir& dir, const std::string& content, const std::string& needle) {
  const std::string path = dir / "bad.safetensors";
  spit(path, content);
  try {
    read_safetensors_header(path);
    ADD_FAILURE() << "no DataError for a file that should contain: " << needle;
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// write_safetensors must throw UsageError mentioning `needle` and leave the directory untouched.
void expect_usage_error(const std::vector<TensorView>& tensors, const std::string& needle) {
  TempDir dir;
  try {
    write_safetensors(dir / "x.safetensors", tensors);
    ADD_FAILURE() << "no UsageError, expected one mentioning: " << needle;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.listing().empty());
}

}  // namespace

TEST(Safetensors, DTypeNamesAndSizes) {
  EXPECT_EQ(io::dtype_name(DType::kF64), "F64");
  EXPECT_EQ(io::dtype_name(DType::kF32), "F32");
  EXPECT_EQ(io::dtype_name(DType::kF16), "F16");
  EXPECT_EQ(io::dtype_name(DType::kBF16), "BF16");
  EXPECT_EQ(io::dtype_name(DType::kI64), "I64");
  EXPECT_EQ(io::dtype_name(DType::kI32), "I32");
  EXPECT_EQ(io::dtype_name(DType::kI16), "I16");
  EXPECT_EQ(io::dtype_name(DType::kI8), "I8");
  EXPECT_EQ(io::dtype_name(DType::kU8), "U8");
  EXPECT_EQ(io::dtype_name(DType::kBool), "BOOL");
  EXPECT_EQ(io::dtype_size(DType::kF64), 8U);
  EXPECT_EQ(io::dtype_size(DType::kBF16), 2U);
  EXPECT_EQ(io::dtype_size(DType::kI32), 4U);
  EXPECT_EQ(io::dtype_size(DType::kBool), 1U);
}

TEST(Safetensors, RoundTripThroughHeaderReader) {
  TempDir dir;
  const std::vector<float> w{1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  const std::vector<std::uint16_t> h{0x3F80, 0xC0A0};
  const std::int64_t step = 1234567890123;
  const std::vector<std::uint8_t> mask{1, 0, 1};
  const std::vector<TensorView> tensors{
      {"layer.weight", DType::kF32, {2, 3}, w.data(), w.size() * 4},
      {"half", DType::kBF16, {2}, h.data(), h.size() * 2},
      {"step", DType::kI64, {}, &step, 8},  // 0-d scalar
      {"empty", DType::kF32, {0, 3}, nullptr, 0},
      {"mask", DType::kBool, {3}, mask.data(), mask.size()},
  };
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"epoch", "3"}};
  const std::string path = dir / "model.safetensors";
  write_safetensors(path, tensors, meta);

  std::map<std::string, std::string> meta_back;
  const auto entries = read_safetensors_header(path, &meta_back);
  EXPECT_EQ(meta_back, meta);
  ASSERT_EQ(entries.size(), tensors.size());
  const std::string file = slurp(path);
  const std::uint64_t n = header_size(file);
  EXPECT_EQ(n % 8, 0U);
  EXPECT_EQ(file[8], '{');
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(entries[i].name, tensors[i].name);
    EXPECT_EQ(entries[i].dtype, tensors[i].dtype);
    EXPECT_EQ(entries[i].shape, tensors[i].shape);
    EXPECT_EQ(entries[i].begin, offset);
    EXPECT_EQ(entries[i].end, offset + tensors[i].nbytes);
    if (tensors[i].nbytes > 0) {
      EXPECT_EQ(std::memcmp(file.data() + 8 + n + offset, tensors[i].data, tensors[i].nbytes), 0);
    }
    offset += tensors[i].nbytes;
  }
  EXPECT_EQ(file.size(), 8 + n + offset);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});  // no temp file left
}

TEST(Safetensors, NoTensorsNoMetadata) {
  TempDir dir;
  write_safetensors(dir / "e.safetensors", {});
  EXPECT_TRUE(read_safetensors_header(dir / "e.safetensors").empty());
  EXPECT_EQ(slurp(dir / "e.safetensors"), raw_file("{}      ", ""));
}

TEST(Safetensors, OverwritesAnExistingFile) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  const float a = 1.f;
  const double b[2] = {1.0, 2.0};
  write_safetensors(path, {{"a", DType::kF32, {1}, &a, 4}});
  write_safetensors(path, {{"b", DType::kF64, {2}, b, 16}});
  const auto entries = read_safetensors_header(path);
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(entries[0].name, "b");
  EXPECT_EQ(entries[0].dtype, DType::kF64);
}

TEST(Safetensors, ValidationErrors) {
  const float f[4] = {};
  expect_usage_error({{"", DType::kF32, {1}, f, 4}}, "empty name");
  expect_usage_error({{"a", DType::kF32, {1}, f, 4}, {"a", DType::kF32, {1}, f, 4}}, "duplicate tensor name \"a\"");
  expect_usage_error({{"a", DType::kF32, {2, 2}, f, 12}}, "nbytes is 12");
  expect_usage_error({{"a", DType::kF32, {-1}, f, 4}}, "invalid shape [-1]");
  expect_usage_error({{"__metadata__", DType::kF32, {1}, f, 4}}, "reserved");
  expect_usage_error({{"a", DType::kF32, {1}, nullptr, 4}}, "no data");
}

TEST(Safetensors, ValidationErrorLeavesExistingFileAlone) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  const float f = 1.f;
  write_safetensors(path, {{"a", DType::kF32, {1}, &f, 4}});
  const std::string before = slurp(path);
  EXPECT_THROW(write_safetensors(path, {{"a", DType::kF32, {2}, &f, 4}}), UsageError);
  EXPECT_EQ(slurp(path), before);
}

TEST(Safetensors, FailedWriteLeavesNothingBehind) {
  TempDir dir;
  const float f = 1.f;
  // Directory does not exist: the temp file cannot even be created.
  const std::string missing = dir / "no-such-dir/m.safetensors";
  try {
    write_safetensors(missing, {{"a", DType::kF32, {1}, &f, 4}});
    ADD_FAILURE() << "no SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.listing().empty());
  // Target is a directory: the temp file is written, the rename fails, the temp file must go.
  std::filesystem::create_directory(dir / "taken");
  EXPECT_THROW(write_safetensors(dir / "taken", {{"a", DType::kF32, {1}, &f, 4}}), SystemError);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"taken"});
  EXPECT_TRUE(std::filesystem::is_empty(dir / "taken"));
}

TEST(Safetensors, CorruptFilesGiveDataError) {
  TempDir dir;
  const std::string f32x2 = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, 'x');
  // Sanity: the well-formed version of these files is accepted.
  spit(dir / "good.safetensors", raw_file("{" + f32x2 + "}", eight));
  ASSERT_EQ(read_safetensors_header(dir / "good.safetensors").size(), 1U);

  expect_data_error(dir, "abc", "too short");
  expect_data_error(dir, raw_file("  ", std::string(100, ' ')), "does not start with '{'");
  std::string huge(8, '\0');
  huge[5] = 1;  // 2^40
  expect_data_error(dir, huge + "{}", "exceeds the 100 MB limit");
  expect_data_error(dir, raw_file("{" + f32x2 + "}", eight).substr(0, 20), "only 12 bytes follow");
  expect_data_error(dir, raw_file(" {}", ""), "does not start with '{'");
  expect_data_error(dir, raw_file("{\"t\":", ""), "not valid JSON");
  // nlohmann reports 1e999 as out_of_range, not parse_error (found by tests/fuzz/fuzz_safetensors)
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[1e999,8]}})", eight),
                    "not valid JSON");
  expect_data_error(dir, raw_file("{" + f32x2 + "}", eight.substr(0, 4)), "run past the end");  // truncated data
  expect_data_error(dir, raw_file("{" + f32x2 + "}", eight + "zz"), "belong to no tensor (after");
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"Q8","shape":[2],"data_offsets":[0,2]}})", "xx"),
                    "dtype \"Q8\" is unknown");
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})", "xx"), "not supported");
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
                    "needs 12 bytes");
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight), "non-negative");
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight), "end before");
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"F32","shape":[2]}})", eight), "data_offsets");
  expect_data_error(dir, raw_file(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", eight),
                    "belong to no tensor (before");
  expect_data_error(dir,
                    raw_file(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                             R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                             eight),
                    "overlaps");
  expect_data_error(dir, raw_file(R"({"__metadata__":{"k":1}})", ""), "not a string");
  expect_data_error(dir, raw_file("[1]", ""), "does not start with '{'");

  try {
    read_safetensors_header(dir / "missing.safetensors");
    ADD_FAILURE() << "no DataError for a missing file";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos) << e.what();
  }
}
