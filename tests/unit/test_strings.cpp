#include <cstdint>
#include <limits>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/table.h>

using namespace trainbox;

TEST(Strings, VersionsCompareComponentWise) {
  EXPECT_LT(compare_versions("535.183.01", "570.26"), 0);
  EXPECT_GT(compare_versions("580.95.05", "580"), 0);
  EXPECT_EQ(compare_versions("12.0", "12"), 0);
  EXPECT_LT(compare_versions("9.1.0", "9.19.0"), 0);  // numeric, not lexical
  EXPECT_TRUE(parse_version("12.x").empty());
}

TEST(Strings, ClosestMatchSuggestsNearKeysOnly) {
  std::vector<std::string> keys = {"epochs", "batch_size", "lr", "weight_decay"};
  EXPECT_EQ(closest_match("epoch", keys), "epochs");
  EXPECT_EQ(closest_match("batchsize", keys), "batch_size");
  EXPECT_EQ(closest_match("completely_unrelated", keys), "");
}

TEST(Strings, HumanBytes) {
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(64ULL << 20), "64.0 MiB");
  EXPECT_EQ(human_bytes(150754820096ULL), "140 GiB");
}

TEST(Strings, SplitKeepsOrEmptyFields) {
  EXPECT_EQ(split("a::b", ':'), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(split("a::b", ':', false), (std::vector<std::string>{"a", "", "b"}));
}

TEST(Table, AlignsColumns) {
  Table t({"a", "long header"}, {false, true});
  t.add_row({"xyz", "1"});
  EXPECT_EQ(t.render(), "a    long header\n---  -----------\nxyz            1\n");
}

// --- sizes as people type them (nccl-tests' -b 8 -e 128M) ---
namespace {
// The UsageError's message for parse_size(text), "" when it did not throw one.
std::string size_error(const std::string& text) {
  try {
    parse_size(text, "--max-bytes");
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.hint()).find("e.g. 8, 64K, 128M, 1G"), std::string::npos) << e.hint();
    return e.what();
  }
  return {};
}
}  // namespace

TEST(Strings, ParseSizePlainAndBinarySuffixes) {
  EXPECT_EQ(parse_size("0", "x"), 0);
  EXPECT_EQ(parse_size("8", "x"), 8);
  EXPECT_EQ(parse_size("512B", "x"), 512);
  EXPECT_EQ(parse_size("64K", "x"), 64 * 1024);
  EXPECT_EQ(parse_size("64k", "x"), 64 * 1024);
  EXPECT_EQ(parse_size("128M", "x"), 128LL << 20);
  EXPECT_EQ(parse_size("1G", "x"), 1LL << 30);
  EXPECT_EQ(parse_size("2T", "x"), 2LL << 40);
  // "B" and "iB" change nothing: MB is 2^20 here too (documented in strings.h).
  EXPECT_EQ(parse_size("1KiB", "x"), 1024);
  EXPECT_EQ(parse_size("4MB", "x"), 4LL << 20);
  EXPECT_EQ(parse_size("4mb", "x"), 4LL << 20);
  EXPECT_EQ(parse_size(" 64 MiB ", "x"), 64LL << 20);  // as human_bytes() prints it, spaces and all
  EXPECT_EQ(parse_size("9223372036854775807", "x"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(parse_size("8388607T", "x"), 8388607LL << 40);  // the largest whole number of TiB
}

TEST(Strings, ParseSizeRejectsNegativesJunkAndOverflowNamingWhatAndValue) {
  EXPECT_EQ(size_error("-8"), "--max-bytes '-8': a size cannot be negative");
  EXPECT_EQ(size_error("12abc"), "--max-bytes '12abc': not a size");
  for (const char* junk : {"", " ", "K", "+8", "1.5G", "8 8", "64KK", "64Kb2", "1P", "0x10", "64iB", "64Bi"})
    EXPECT_EQ(size_error(junk), fmt::format("--max-bytes '{}': not a size", junk)) << junk;
  for (const char* huge : {"9223372036854775808", "99999999999999999999999", "8388608T", "9007199254740992K"})
    EXPECT_EQ(size_error(huge), fmt::format("--max-bytes '{}': too large (at most 2^63 - 1 bytes)", huge)) << huge;
}
