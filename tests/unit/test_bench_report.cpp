#include <gtest/gtest.h>

#include <sstream>

#include <trainbox/bench/report.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

using namespace trainbox::bench;

TEST(BenchMetrics, NcclTestsBandwidthDefinitions) {
  // 1 GB in 1 s: algbw 1 GB/s; allreduce busbw = algbw * 2(n-1)/n.
  EXPECT_DOUBLE_EQ(algbw_gbps(1e9, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(busbw_gbps(Collective::kAllReduce, 1e9, 1.0, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_gbps(Collective::kAllReduce, 1e9, 1.0, 8), 1.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 1), 0.0);  // one rank moves nothing over the bus
}

TEST(BenchMetrics, GemmFlopsAndPercent) {
  // 8192³ in 1.39 ms ≈ 791 TFLOP/s (the H200 reference figure).
  EXPECT_NEAR(tflops_gemm(8192, 8192, 8192, 1.39e-3), 791.0, 1.0);
  EXPECT_DOUBLE_EQ(percent_of(395.0, 790.0), 50.0);
}

TEST(BenchMetrics, SummarizeMedianMinMax) {
  auto s = summarize({3, 1, 2, 10});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
}

TEST(BenchReport, TableAndJsonHoldTheSameRows) {
  BenchReport r("demo");
  r.header("device", "cpu");
  r.columns({"size", "type", "time_us", "busbw"});
  r.add({8, "float", 36.55, 0.000219});
  r.add({1048576, "float", 1234.5, 1.75});
  r.footer("# Avg bus bandwidth : 0.875");
  auto text = r.render();
  auto j = r.to_json();
  EXPECT_EQ(j["header"]["device"], "cpu");
  EXPECT_NE(text.find("# device: cpu"), std::string::npos);
  // Every data line of the table, split on spaces, equals the JSON row's formatted cells.
  std::vector<std::string> data_lines;
  for (const auto& line : trainbox::split(text, '\n'))
    if (!line.empty() && line[0] != '#') data_lines.push_back(line);
  ASSERT_EQ(data_lines.size(), j["rows"].size());
  for (std::size_t i = 0; i < data_lines.size(); ++i) {
    auto cells = trainbox::split(data_lines[i], ' ');
    ASSERT_EQ(cells.size(), 4u);
    for (std::size_t c = 0; c < 4; ++c)
      EXPECT_EQ(cells[c], format_cell(j["rows"][i][j["columns"][c].get<std::string>()]));
  }
  EXPECT_EQ(j["footer"][0], "# Avg bus bandwidth : 0.875");
  EXPECT_THROW(r.add({1, 2}), trainbox::SystemError);
}
