#include <gtest/gtest.h>

#include <trainbox/util/plural.h>
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

// "1 steps" / "1 epochs" in trainbox train's start line (issue 43).
TEST(Strings, PluralSaysOneWithoutAnS) {
  EXPECT_EQ(plural(1, "step"), "1 step");
  EXPECT_EQ(plural(2, "epoch"), "2 epochs");
  EXPECT_EQ(plural(0, "step"), "0 steps");
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
