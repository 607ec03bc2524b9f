// `trainbox preflight --config`'s compression finding (distributed/link_advice.h): the
// verdict from the fp32 exchange time over the slowest link against the measured compute, the
// ratios from the compress module's estimate for the model's own shapes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <trainbox/distributed/link_advice.h>

using namespace trainbox::dist;

namespace {
// A GPT-2 block's matrices (768 wide) and its vectors: PowerSGD compresses the matrices only.
LinkAdviceInputs gpt_block(double compute_s, double link_gbytes_per_s) {
  LinkAdviceInputs in;
  in.shapes = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}, {768}, {768}, {2304}, {3072}};
  in.compute_s = compute_s;
  in.world = 2;
  in.link_gbytes_per_s = link_gbytes_per_s;
  in.model = "gpt";
  return in;
}
std::int64_t elements(const LinkAdviceInputs& in) {
  std::int64_t n = 0;
  for (const auto& s : in.shapes) {
    std::int64_t e = 1;
    for (auto d : s) e *= d;
    n += e;
  }
  return n;
}
}  // namespace

TEST(LinkAdvice, SlowLinkNamesPowerSgdWithTheModelsRatio) {
  const auto in = gpt_block(0.05, 0.0125);  // 100 Mbit/s
  const LinkAdvice a = advise_compression(in);
  EXPECT_EQ(a.verdict, LinkVerdictKind::kSlow);
  EXPECT_EQ(a.fp32_bytes, 4 * elements(in));  // 2(N-1)/N = 1 at 2 ranks
  EXPECT_NEAR(a.fp32_exchange_s, 4.0 * double(elements(in)) / 0.0125e9, 1e-9);
  ASSERT_EQ(a.choices.size(), 2u);
  CompressionOptions p;
  p.method = CompressionMethod::kPowerSgd;
  p.rank = 4;
  EXPECT_DOUBLE_EQ(a.choices[0].ratio, estimate_compression(in.shapes, p).ratio());
  EXPECT_GT(a.choices[0].ratio, 50);
  EXPECT_NEAR(a.choices[1].ratio, 2.0, 1e-9);  // bf16
  EXPECT_NE(a.line.find("dist.grad_compression = \"powersgd\" with dist.powersgd.rank = 4"), std::string::npos)
      << a.line;
  EXPECT_NE(a.line.find(std::to_string(static_cast<long>(a.choices[0].ratio + 0.5)) + "x fewer"), std::string::npos)
      << a.line;
  EXPECT_NE(a.line.find("dist.grad_compression = \"bf16\""), std::string::npos) << a.line;
}

TEST(LinkAdvice, ConfiguredRankIsTheOneJudged) {
  auto in = gpt_block(0.05, 0.0125);
  in.configured.method = CompressionMethod::kPowerSgd;
  in.configured.rank = 32;
  const LinkAdvice a = advise_compression(in);
  EXPECT_NE(a.line.find("dist.powersgd.rank = 32"), std::string::npos) << a.line;
  CompressionOptions p = in.configured;
  EXPECT_DOUBLE_EQ(a.choices[0].ratio, estimate_compression(in.shapes, p).ratio());
}

TEST(LinkAdvice, FastLinkSaysLeaveItOff) {
  const LinkAdvice a = advise_compression(gpt_block(0.05, 10.0));  // 80 Gbit/s: 2.8 ms (28 MB) of 50 ms
  EXPECT_EQ(a.verdict, LinkVerdictKind::kFast);
  EXPECT_NE(a.line.find("leave dist.grad_compression = \"none\""), std::string::npos) << a.line;
  const LinkAdvice b = advise_compression(gpt_block(0.05, 1.0));  // 28 ms of 50 ms: between
  EXPECT_EQ(b.verdict, LinkVerdictKind::kBetween);
  EXPECT_EQ(b.line.find("leave"), std::string::npos) << b.line;
}

TEST(LinkAdvice, NothingToJudgeWithoutALinkOrAPeer) {
  EXPECT_TRUE(advise_compression(gpt_block(0.05, 0)).line.empty());
  auto one = gpt_block(0.05, 1.0);
  one.world = 1;
  EXPECT_TRUE(advise_compression(one).line.empty());
}

TEST(LinkAdvice, Json) {
  const auto in = gpt_block(0.05, 0.0125);
  const auto j = link_advice_json(advise_compression(in), in);
  EXPECT_EQ(j["verdict"], "slow");
  EXPECT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["fp32_bytes_per_step"], 4 * elements(in));
}
