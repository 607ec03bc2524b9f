// util/parse.h: what each value parser accepts, and every shape of its error messages.
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>

using namespace trainbox;

namespace {
Given flag(const std::string& name, const std::string& text) { return Given{text, name, true}; }
Given var(const std::string& name, const std::string& text) { return Given{text, name, false}; }

// The ParseError a call throws, checked to be a UsageError with exit code 2; "" when none.
template <typename F>
ParseError refusal(F&& f) {
  try {
    f();
  } catch (const ParseError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    return e;
  }
  ADD_FAILURE() << "no ParseError";
  return ParseError(Given{}, "");
}

std::string size_error(const std::string& text) {
  return refusal([&] { parse_size(flag("--max-bytes", text)); }).what();
}
}  // namespace

// --- the shape: "<given>: must be <allowed>", fix "pass <allowed>" unless the caller has one ---
TEST(Parse, GivenShowsAFlagOrAVariableAsItWasTyped) {
  EXPECT_EQ(flag("--nnodes", "0").shown(), "--nnodes 0");
  EXPECT_EQ(var("PET_NNODES", "0").shown(), "PET_NNODES=0");
}

TEST(Parse, EveryErrorNamesTheValueAndWhatIsAllowed) {
  auto e = refusal([] { parse_int(flag("--master-port", "70000"), 1, 65535); });
  EXPECT_STREQ(e.what(), "--master-port 70000: must be a whole number from 1 to 65535");
  EXPECT_EQ(e.hint(), "pass a whole number from 1 to 65535");
  EXPECT_EQ(e.allowed(), "a whole number from 1 to 65535");
  // A caller's fix replaces the generic one; the message stays the same.
  e = refusal([] { parse_int(var("PET_NNODES", "x"), 1, 65536, "pass the number of nodes"); });
  EXPECT_STREQ(e.what(), "PET_NNODES=x: must be a whole number from 1 to 65536");
  EXPECT_EQ(e.hint(), "pass the number of nodes");
}

// --- integers ---
TEST(ParseInteger, WholeNumbersOnly) {
  EXPECT_EQ(parse_integer("42"), 42);
  EXPECT_EQ(parse_integer(" -7 "), -7);
  EXPECT_EQ(parse_integer("+3"), 3);
  EXPECT_EQ(parse_integer("000123456789012345678"), std::nullopt);  // more than 18 digits
  EXPECT_EQ(parse_integer("123456789012345678"), 123456789012345678LL);
  for (const char* bad : {"", " ", "-", "+", "4x", "1.0", "0x10", "1e3", "1 2", "--1", "٣"})
    EXPECT_EQ(parse_integer(bad), std::nullopt) << bad;
}

TEST(ParseInt, RangesAndTheirWords) {
  EXPECT_EQ(parse_int(flag("--x", " 5 "), 1, 10), 5);
  EXPECT_EQ(parse_int(flag("--x", "1"), 1, 10), 1);
  EXPECT_EQ(parse_int(flag("--x", "10"), 1, 10), 10);
  EXPECT_EQ(parse_int(flag("--x", "-3"), std::numeric_limits<long long>::min()), -3);
  EXPECT_STREQ(refusal([] { parse_int(flag("--iters", "0"), 1); }).what(), "--iters 0: must be a whole number >= 1");
  EXPECT_STREQ(refusal([] { parse_int(flag("--n", "99999999999"), 1, 65536); }).what(),
               "--n 99999999999: must be a whole number from 1 to 65536");
  EXPECT_STREQ(refusal([] { parse_int(flag("--n", "abc"), 1, 4); }).what(),
               "--n abc: must be a whole number from 1 to 4");
  EXPECT_STREQ(refusal([] { parse_int(flag("--n", ""), 1, 4); }).what(), "--n : must be a whole number from 1 to 4");
  EXPECT_EQ(refusal([] { parse_int(flag("--n", "x"), std::numeric_limits<long long>::min()); }).allowed(),
            "a whole number");
}

// --- numbers and seconds ---
TEST(ParseReal, DecimalAndScientificOnly) {
  EXPECT_EQ(parse_real("1.5"), 1.5);
  EXPECT_EQ(parse_real(" 2e-3 "), 2e-3);
  EXPECT_EQ(parse_real("-4"), -4.0);
  EXPECT_EQ(parse_real(".5"), 0.5);
  EXPECT_EQ(parse_real("5."), 5.0);
  EXPECT_EQ(parse_real("+1E3"), 1000.0);
  for (const char* bad : {"", ".", "e3", "1e", "1e+", "0x10", "inf", "nan", "1,5", "1.5s", "30s", "5m", "1e999", "- 1"})
    EXPECT_EQ(parse_real(bad), std::nullopt) << bad;
}

TEST(ParseNumber, BoundsAndTheirWords) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(parse_number(flag("--t", "0.8"), 0, kInf, true), 0.8);
  EXPECT_EQ(parse_number(flag("--t", "0"), 0, 1), 0.0);
  EXPECT_STREQ(refusal([] { parse_number(flag("--temperature", "0"), 0, kInf, true); }).what(),
               "--temperature 0: must be a number > 0");
  EXPECT_STREQ(refusal([] { parse_number(flag("--temperature", "hot"), 0, kInf, true); }).what(),
               "--temperature hot: must be a number > 0");
  EXPECT_STREQ(refusal([] { parse_number(flag("--p", "-1"), 0, kInf); }).what(), "--p -1: must be a number >= 0");
  EXPECT_STREQ(refusal([] { parse_number(flag("--p", "2"), 0, 1); }).what(), "--p 2: must be a number >= 0 and <= 1");
}

TEST(ParseSeconds, PlainSecondsCappedAt1e9) {
  EXPECT_EQ(parse_seconds(flag("--grace-period", "30"), 0), 30.0);
  EXPECT_EQ(parse_seconds(flag("--grace-period", "0.5"), 0), 0.5);
  EXPECT_EQ(parse_seconds(flag("--grace-period", "1e9"), 0), 1e9);
  // The cap --grace-period lacked before (issue 19), and no unit suffixes: the CLI never took them.
  for (const char* bad : {"1e10", "-1", "30s", "5m", "inf", ""})
    EXPECT_STREQ(refusal([&] { parse_seconds(flag("--grace-period", bad), 0); }).what(),
                 fmt::format("--grace-period {}: must be a number of seconds from 0 to 1e9", bad).c_str());
  EXPECT_STREQ(refusal([] { parse_seconds(var("PET_MONITOR_INTERVAL", "0"), 0.001); }).what(),
               "PET_MONITOR_INTERVAL=0: must be a number of seconds from 0.001 to 1e9");
}

// --- booleans: one rule, llama.cpp's, and every spelling the three old parsers took ---
TEST(ParseBool, TruthyAndFalsey) {
  for (const char* t : {"1", "true", "True", "TRUE", "yes", "Yes", "on", "ON", " 1 "}) {
    EXPECT_TRUE(is_truthy(t)) << t;
    EXPECT_FALSE(is_falsey(t)) << t;
    EXPECT_EQ(parse_bool(t), true) << t;
  }
  for (const char* f : {"0", "false", "False", "no", "NO", "off", "Off", " 0 "}) {
    EXPECT_TRUE(is_falsey(f)) << f;
    EXPECT_FALSE(is_truthy(f)) << f;
    EXPECT_EQ(parse_bool(f), false) << f;
  }
  for (const char* n : {"", "maybe", "2", "y", "n", "enable", "-1"}) {
    EXPECT_FALSE(is_truthy(n)) << n;
    EXPECT_FALSE(is_falsey(n)) << n;
    EXPECT_EQ(parse_bool(n), std::nullopt) << n;
  }
  EXPECT_TRUE(parse_bool(var("--rdzv-conf is_host", "Yes")));
  auto e = refusal([] { parse_bool(var("--rdzv-conf is_host", "maybe")); });
  EXPECT_STREQ(e.what(), "--rdzv-conf is_host=maybe: must be 1 or 0 (or true/false, yes/no, on/off)");
}

// --- sizes as people type them (nccl-tests' -b 8 -e 128M) ---
TEST(ParseSize, PlainAndBinarySuffixes) {
  auto size = [](const char* t) { return parse_size(flag("x", t)); };
  EXPECT_EQ(size("0"), 0);
  EXPECT_EQ(size("8"), 8);
  EXPECT_EQ(size("512B"), 512);
  EXPECT_EQ(size("64K"), 64 * 1024);
  EXPECT_EQ(size("64k"), 64 * 1024);
  EXPECT_EQ(size("128M"), 128LL << 20);
  EXPECT_EQ(size("1G"), 1LL << 30);
  EXPECT_EQ(size("2T"), 2LL << 40);
  // "B" and "iB" change nothing: MB is 2^20 here too (documented in parse.h).
  EXPECT_EQ(size("1KiB"), 1024);
  EXPECT_EQ(size("4MB"), 4LL << 20);
  EXPECT_EQ(size("4mb"), 4LL << 20);
  EXPECT_EQ(size(" 64 MiB "), 64LL << 20);  // as human_bytes() prints it, spaces and all
  EXPECT_EQ(size("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(size("8388607T"), 8388607LL << 40);  // the largest whole number of TiB
}

// --budget 1.5GiB (issue 43): a fraction with a unit, rounded down to whole bytes; GB is GiB.
TEST(ParseSize, FractionsWithAUnitRoundDownToWholeBytes) {
  auto size = [](const char* t) { return parse_size(flag("x", t)); };
  EXPECT_EQ(size("1.5GiB"), 3LL << 29);
  EXPECT_EQ(size("1.5G"), 3LL << 29);
  EXPECT_EQ(size("0.5 GB"), 1LL << 29);
  EXPECT_EQ(size("2.25m"), 9LL << 18);
  EXPECT_EQ(size("1.0K"), 1024);
  EXPECT_EQ(size("1.3K"), 1331);  // 1331.2: rounded down
  EXPECT_EQ(size("0.000000001K"), 0);
  EXPECT_EQ(size("8gb"), 8LL << 30);  // binary, as every size here: never 8 x 10^9
  EXPECT_EQ(size("7.999999999999999999T"), (8LL << 40) - 1);
  EXPECT_EQ(size("8388607.5T"), (8388607LL << 40) + (1LL << 39));
  auto e = refusal([] { parse_size(flag("--budget", "1.5")); });
  EXPECT_STREQ(e.what(), "--budget 1.5: must be a byte count (e.g. 8, 64K, 1.5G, 8GiB)");
  EXPECT_NE(e.hint().find("8GB = 8GiB = 8 x 2^30 bytes"), std::string::npos) << e.hint();
  EXPECT_NE(e.hint().find("a fraction needs one of them (1.5G)"), std::string::npos) << e.hint();
}

TEST(ParseSize, RefusesNegativesJunkAndOverflowNamingTheValue) {
  const std::string allowed = "must be a byte count (e.g. 8, 64K, 1.5G, 8GiB)";
  for (const char* junk : {"-8",
                           "",
                           " ",
                           "K",
                           "+8",
                           "1.5",
                           "1.5B",
                           ".5G",
                           "1.G",
                           "1..5G",
                           "1.5.2G",
                           "1,5G",
                           "1.5e3K",
                           "0.1234567890123456789K",
                           "8388608.0T",
                           "8 8",
                           "64KK",
                           "64Kb2",
                           "1P",
                           "0x10",
                           "64iB",
                           "64Bi",
                           "12abc",
                           "9223372036854775808",
                           "99999999999999999999999",
                           "8388608T",
                           "9007199254740992K"})
    EXPECT_EQ(size_error(junk), fmt::format("--max-bytes {}: {}", junk, allowed)) << junk;
  auto e = refusal([] { parse_size(flag("--maxbytes", "0"), 1); });
  EXPECT_STREQ(e.what(), "--maxbytes 0: must be a byte count >= 1 (e.g. 8, 64K, 1.5G, 8GiB)");
  EXPECT_NE(e.hint().find("powers of 1024"), std::string::npos) << e.hint();
  EXPECT_EQ(parse_size(flag("--maxbytes", "1"), 1), 1);
}
