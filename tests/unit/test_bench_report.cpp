#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
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

// Live: the `#` lines and the column row go out at columns(), each row at add(), the footers at
// finish(); what went out is the report's text; render() and to_json() keep the whole report.
TEST(BenchReport, LiveReportPrintsEachRowAsItIsAdded) {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  ASSERT_NE(out, nullptr);
  const auto printed = [&] {
    std::fflush(out);
    return std::string(buf, len);
  };
  BenchReport r("gemm", out);
  EXPECT_TRUE(r.live());
  r.header("device", "cpu, 2 threads");
  EXPECT_EQ(printed(), "");  // nothing before the table's shape is known
  r.columns({"dtype", "m=n=k", "tflops"});
  EXPECT_EQ(printed(), "# trainbox bench gemm\n# device: cpu, 2 threads\n#      dtype      m=n=k     tflops\n");
  r.add({"fp32", 64, 0.5});
  EXPECT_EQ(printed().substr(printed().rfind('#')),
            "#      dtype      m=n=k     tflops\n        fp32         64       0.50\n");
  r.header("note", "learnt mid-run");
  r.add({"bf16", 64, 0.00123});
  r.fail("bf16 differs");
  EXPECT_EQ(printed().find("CHECK FAILED"), std::string::npos);  // footers wait for finish()
  r.finish();
  const std::string all = printed();
  EXPECT_NE(all.find("# note: learnt mid-run\n        bf16         64    0.00123\n# CHECK FAILED: bf16 differs\n"),
            std::string::npos)
      << all;
  EXPECT_EQ(r.rows(), 2u);
  EXPECT_EQ(r.to_json()["rows"].size(), 2u);
  EXPECT_NE(r.render().find("bf16"), std::string::npos);
  std::fclose(out);
  std::free(buf);
}

TEST(BenchReport, NotLiveByDefault) {
  BenchReport r("x");
  EXPECT_FALSE(r.live());
  r.columns({"a"});
  r.add({1});
  r.finish();  // no output, no crash
  EXPECT_EQ(r.render(), "# trainbox bench x\n# a\n  1\n");
}
