// The progress line (metrics/progress.h): a slow step's rate is a real number, never "0", and a
// sequence model's line shows tokens/s, the unit of its epoch line and its summary.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <trainbox/metrics/progress.h>

using trainbox::metrics::Progress;
using trainbox::metrics::ProgressState;

TEST(Progress, RatesKeepTheirDigits) {
  EXPECT_EQ(Progress::format_rate(0.0314), "0.0314");  // 5 resnet18 steps of 64 in 159 s: 2.01, not 0
  EXPECT_EQ(Progress::format_rate(2.0126), "2.01");
  EXPECT_EQ(Progress::format_rate(63.24), "63.2");
  EXPECT_EQ(Progress::format_rate(99.96), "100");
  EXPECT_EQ(Progress::format_rate(13825.4), "13825");
  EXPECT_EQ(Progress::format_rate(0), "0");  // unknown (no time measured yet)
  EXPECT_EQ(Progress::format_rate(-1), "0");
}

namespace {
std::string line_of(const ProgressState& s) {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  {
    Progress p(Progress::Mode::kLines, out);
    p.update(s);
  }
  std::fclose(out);
  std::string text(buf, len);
  std::free(buf);
  return text;
}
}  // namespace

TEST(Progress, LinesShowSamplesOrTokensPerSecond) {
  ProgressState s{1, 90, 5, 1407, 5, 126630, 6.9, 0.1, 2.01, 3600};
  EXPECT_EQ(line_of(s), "epoch 1/90 batch 5/1407 step 5/126630 loss 6.9000 lr 0.1 2.01 samples/s ETA 1:00:00\n");
  s.tokens_per_s = 13825;  // a GPT: tokens/s, as its summary
  EXPECT_NE(line_of(s).find(" 13825 tokens/s ETA"), std::string::npos) << line_of(s);
  EXPECT_EQ(line_of(s).find("samples/s"), std::string::npos);
}
