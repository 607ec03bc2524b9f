// Gradient compression's options, checks and byte counts (distributed/compression.h), and its
// config keys (train/config.h): torch-free. The arithmetic against PyTorch's hooks is
// tests/integration/compression_vs_torch.py.
#include <gtest/gtest.h>

#include <trainbox/distributed/compression.h>
#include <trainbox/train/config.h>
#include <trainbox/util/errors.h>

namespace trainbox::dist {
namespace {

CompressionOptions powersgd(std::int64_t rank) {
  CompressionOptions c;
  c.method = CompressionMethod::kPowerSgd;
  c.rank = rank;
  return c;
}

TEST(Compression, DefaultsArePyTorchsPowerSgdState) {
  const CompressionOptions c;
  EXPECT_EQ(c.method, CompressionMethod::kNone);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.start_step, 1000);
  EXPECT_EQ(c.min_compression_rate, 2.0);
  EXPECT_TRUE(c.error_feedback);
  EXPECT_TRUE(c.warm_start);
  const train::Config cfg;  // the config's defaults are the same
  EXPECT_EQ(cfg.dist.grad_compression, "none");
  EXPECT_EQ(cfg.dist.powersgd_rank, c.rank);
  EXPECT_EQ(cfg.dist.powersgd_start_step, c.start_step);
  EXPECT_EQ(cfg.dist.powersgd_min_compression_rate, c.min_compression_rate);
}

TEST(Compression, MethodNamesRoundTripAndAnUnknownOneIsAConfigError) {
  for (int i = 0; i < kCompressionMethodCount; ++i) {
    const auto m = static_cast<CompressionMethod>(i);
    EXPECT_EQ(parse_compression_method(compression_method_name(m)), m);
  }
  try {
    parse_compression_method("int8");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "dist.grad_compression = \"int8\" is not a compression method");
    EXPECT_NE(e.hint().find("none, fp16, bf16 or powersgd"), std::string::npos);
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
}

TEST(Compression, PyTorchsCompressionTest) {
  // (rows + cols)·rank·rate < rows·cols; 1-D never; the rank clipped to the smaller side.
  EXPECT_TRUE(powersgd_compresses({768, 3072}, powersgd(4)));
  EXPECT_FALSE(powersgd_compresses({3072}, powersgd(1)));
  EXPECT_FALSE(powersgd_compresses({4, 4}, powersgd(1)));        // 8·1·2 = 16, not < 16
  EXPECT_TRUE(powersgd_compresses({5, 5}, powersgd(1)));         // 20 < 25
  EXPECT_TRUE(powersgd_compresses({8, 4, 3, 3}, powersgd(2)));   // 8 × 36: 176 < 288
  EXPECT_FALSE(powersgd_compresses({8, 4, 3, 3}, powersgd(4)));  // 352
  EXPECT_FALSE(powersgd_compresses({3, 1000}, powersgd(8)));     // rank 3 after clipping: 6018, not < 3000
}

TEST(Compression, EstimateCountsBytesAndRatio) {
  const std::vector<std::vector<std::int64_t>> gpt_block = {{768, 3072}, {3072}};
  const auto none = estimate_compression(gpt_block, CompressionOptions{});
  EXPECT_EQ(none.uncompressed_bytes, (768 * 3072 + 3072) * 4);
  EXPECT_EQ(none.compressed_bytes, none.uncompressed_bytes);
  CompressionOptions bf16;
  bf16.method = CompressionMethod::kBf16;
  EXPECT_DOUBLE_EQ(estimate_compression(gpt_block, bf16).ratio(), 2.0);
  const auto ps = estimate_compression({{768, 3072}}, powersgd(4));
  EXPECT_EQ(ps.compressed_bytes, (768 + 3072) * 4 * 4);
  EXPECT_NEAR(ps.ratio(), 153.6, 0.01);  // the facts sheet's "about 153x"
  const auto mixed = estimate_compression(gpt_block, powersgd(4));
  EXPECT_EQ(mixed.compressed_tensors, 1);
  EXPECT_EQ(mixed.plain_tensors, 1);
  EXPECT_EQ(mixed.compressed_bytes, (768 + 3072) * 4 * 4 + 3072 * 4);
}

TEST(Compression, BadOptionsAreConfigErrorsNamingTheKey) {
  auto message = [](const CompressionOptions& c, const std::vector<std::vector<std::int64_t>>& shapes) {
    try {
      check_compression_for_shapes(c, shapes);
    } catch (const ConfigError& e) {
      return std::string(e.what()) + " | " + e.hint();
    }
    return std::string("accepted");
  };
  const std::vector<std::vector<std::int64_t>> mlp = {{128, 784}, {128}, {10, 128}, {10}};
  EXPECT_EQ(message(powersgd(0), mlp).rfind("dist.powersgd.rank = 0 is not allowed", 0), 0u);
  auto late = powersgd(1);
  late.start_step = 1;
  EXPECT_EQ(message(late, mlp).rfind("dist.powersgd.start_step = 1 is not allowed", 0), 0u);
  // Larger than the smaller side of one matrix (10): fine, that one goes whole; of every one: refused.
  EXPECT_EQ(message(powersgd(64), mlp), "accepted");
  EXPECT_EQ(message(powersgd(129), mlp),
            "dist.powersgd.rank = 129 is larger than the smaller side of every matrix of this model (the largest is "
            "128) | set dist.powersgd.rank <= 128 (1, 2 or 4 is typical)");
  EXPECT_NE(message(powersgd(1), {{10}, {3}}).find("needs matrices"), std::string::npos);
  CompressionOptions bf16;
  bf16.method = CompressionMethod::kBf16;
  bf16.rank = 0;  // PowerSGD's keys do not matter to bf16
  EXPECT_EQ(message(bf16, {{10}}), "accepted");
}

TEST(Compression, ConfigKeysParseAndRefuseBadValues) {
  train::Config c;
  train::apply_override(c, "dist.grad_compression=powersgd");
  train::apply_override(c, "dist.powersgd.rank=4");
  train::apply_override(c, "dist.powersgd.start_step=100");
  EXPECT_EQ(c.dist.grad_compression, "powersgd");
  EXPECT_EQ(c.dist.powersgd_rank, 4);
  EXPECT_THROW(train::apply_override(c, "dist.grad_compression=int8"), ConfigError);
  EXPECT_THROW(train::apply_override(c, "dist.powersgd.rank=0"), ConfigError);
  EXPECT_THROW(train::apply_override(c, "dist.powersgd.start_step=1"), ConfigError);
  train::apply_override(c, "dist.zero_stage=2");
  try {
    train::validate(c);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("does not combine with dist.zero_stage = 2"), std::string::npos);
  }
  train::apply_override(c, "dist.grad_compression=bf16");  // bf16 with the reduce-scatter: fine
  EXPECT_NO_THROW(train::validate(c));
}

TEST(Compression, SignaturesDifferWhenAnySettingDoes) {
  const auto base = compression_signature(powersgd(4));
  auto other = powersgd(4);
  other.min_compression_rate = 2.5;
  EXPECT_NE(compression_signature(other), base);
  other = powersgd(4);
  other.warm_start = false;
  EXPECT_NE(compression_signature(other), base);
  EXPECT_EQ(compression_signature(powersgd(4)), base);
}

}  // namespace
}  // namespace trainbox::dist
