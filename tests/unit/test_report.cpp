#include <gtest/gtest.h>

#include <cctype>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include <trainbox/env/report.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

class FixtureRoundTrip : public ::testing::TestWithParam<std::string> {};

// Every fact survives JSON → EnvReport → JSON unchanged: no field is dropped, renamed or retyped.
TEST_P(FixtureRoundTrip, ReportIsUnchanged) {
  auto original = nlohmann::json::parse(test::fixture_text(GetParam()));
  env::EnvReport r = env::report_from_json(original.dump());
  nlohmann::json back = nlohmann::json::parse(env::to_json_string(r));
  EXPECT_EQ(original, back) << "diff: " << nlohmann::json::diff(original, back).dump(1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureRoundTrip,
                         ::testing::Values("healthy-h200.json", "h100x8-nvlink.json", "driver535-cu128.json",
                                           "sm61-cu128.json", "container-shm64-cvd-empty.json", "no-driver.json"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.find('.'));
                           for (auto& c : n)
                             if (!std::isalnum((unsigned char)c)) c = '_';
                           return n;
                         });

TEST(Report, RejectsBrokenJsonWithDataError) {
  EXPECT_THROW(env::report_from_json("{\"host\": "), DataError);
  EXPECT_THROW(env::report_from_json("[1, 2]"), DataError);
  EXPECT_THROW(env::report_from_json(R"({"host": {"cpu_cores": "many"}})"), DataError);
  // Found by tests/fuzz/fuzz_report: a number too big for a double, a schema_version of the wrong type.
  EXPECT_THROW(env::report_from_json(R"({"driver": {"cuda_device_count": 1e999}})"), DataError);
  EXPECT_THROW(env::report_from_json(R"({"schema_version": "2"})"), DataError);
  EXPECT_THROW(env::report_from_json(R"({"host": {"cpu_cores": 2.2e88}})"), DataError);  // UB cast before
}

TEST(Report, RejectsNewerSchema) {
  try {
    env::report_from_json(R"({"schema_version": 99})");
    FAIL() << "accepted a newer schema";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos);
  }
}

TEST(Report, MissingKeysTakeDefaults) {
  env::EnvReport r = env::report_from_json(R"({"host": {"hostname": "x"}})");
  EXPECT_EQ(r.host.hostname, "x");
  EXPECT_EQ(r.host.cpu_cores, -1);
  EXPECT_FALSE(r.torch.found);
}
