// causal_self_attention: trainbox's CPU kernel and its fallback against causal attention
// written out in float64 with ATen ops (q·kᵀ·scale, mask, softmax, ·v), forward and gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include <trainbox/models/attention.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {

// The reference, in float64: [B, T, 3C] → [B, T, C].
torch::Tensor reference(const torch::Tensor& qkv, std::int64_t n_head) {
  const auto B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
  auto parts = qkv.split(C, 2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, D}).transpose(1, 2); };
  auto scores = torch::matmul(heads(parts[0]), heads(parts[1]).transpose(-2, -1)) / std::sqrt(double(D));
  auto mask = torch::ones({T, T}, torch::kBool).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  auto y = torch::matmul(torch::softmax(scores, -1), heads(parts[2]));
  return y.transpose(1, 2).contiguous().view({B, T, C});
}

double max_rel(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

struct Case {
  std::int64_t B, T, H, D;
};

// Forward and d(qkv) of causal_self_attention against the float64 reference.
void check_against_reference(const Case& c, bool expect_kernel) {
  torch::manual_seed(c.B * 1000 + c.T * 10 + c.D);
  const auto C = c.H * c.D;
  auto base = torch::randn({c.B, c.T, 3 * C}, torch::kDouble) * 2;
  auto grad_out = torch::randn({c.B, c.T, C}, torch::kDouble);

  auto ref_in = base.clone().requires_grad_(true);
  auto ref_out = reference(ref_in, c.H);
  ref_out.backward(grad_out);

  auto in = base.to(torch::kFloat).requires_grad_(true);
  ASSERT_EQ(models::uses_cpu_attention_kernel(in, c.H, 0.0), expect_kernel);
  auto out = models::causal_self_attention(in, c.H, 0.0);
  ASSERT_EQ(out.sizes(), ref_out.sizes());
  out.backward(grad_out.to(torch::kFloat));

  SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " H=" << c.H << " D=" << c.D);
  EXPECT_LT(max_rel(out, ref_out.detach()), 2e-6);
  EXPECT_LT(max_rel(in.grad(), ref_in.grad()), 2e-5);
}

TEST(Attention, KernelMatchesFloat64ReferenceAcrossShapes) {
  // Lengths around the 8-key vectors and the 4-row blocks, every head size the kernel has,
  // and the GPT's own shape (T = 128, D = 32).
  for (const Case& c : {Case{1, 1, 1, 16}, Case{2, 3, 2, 16}, Case{1, 7, 3, 32}, Case{2, 8, 2, 32}, Case{1, 9, 1, 64},
                        Case{3, 13, 2, 32}, Case{2, 33, 2, 128}, Case{2, 128, 4, 32}, Case{1, 130, 2, 64}})
    check_against_reference(c, true);
}

TEST(Attention, OtherHeadSizesTakeAtenPathAndAgree) {
  check_against_reference(Case{2, 17, 2, 24}, false);
  check_against_reference(Case{1, 9, 3, 8}, false);
}

TEST(Attention, KernelOnlyForFloat32WithoutDropout) {
  auto qkv = torch::randn({2, 8, 3 * 64});
  EXPECT_TRUE(models::uses_cpu_attention_kernel(qkv, 2, 0.0));
  EXPECT_FALSE(models::uses_cpu_attention_kernel(qkv, 2, 0.1));
  EXPECT_FALSE(models::uses_cpu_attention_kernel(qkv.to(torch::kBFloat16), 2, 0.0));
  EXPECT_FALSE(models::uses_cpu_attention_kernel(qkv.to(torch::kDouble), 2, 0.0));
}

TEST(Attention, WithDropoutOnCpuItIsAtenMathPathBitForBit) {
  // math_causal_self_attention is ATen's math path written out, its dropout through
  // trainbox::dropout: from the same generator state it draws the same mask and gives the same
  // output and the same gradient of qkv, bit for bit (so a checkpointed block, which runs it,
  // equals a block that is not, which runs ATen's).
  const std::int64_t C = 64, H = 2, D = C / H, B = 2, T = 16;
  const auto base = torch::randn({B, T, 3 * C});
  const auto grad_out = torch::randn({B, T, C});
  for (double p : {0.0, 0.3}) {
    SCOPED_TRACE(testing::Message() << "dropout " << p);
    auto ours_in = base.clone().requires_grad_(true), aten_in = base.clone().requires_grad_(true);
    torch::manual_seed(11);
    auto ours = models::math_causal_self_attention(ours_in, H, p);
    ours.backward(grad_out);
    torch::manual_seed(11);
    auto parts = aten_in.split(C, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
    auto aten = std::get<0>(at::_scaled_dot_product_attention_math(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                                                   /*attn_mask=*/{}, p, /*is_causal=*/true))
                    .transpose(1, 2)
                    .contiguous()
                    .view({B, T, C});
    aten.backward(grad_out);
    EXPECT_TRUE(torch::equal(ours, aten)) << (ours - aten).abs().max().item<double>();
    EXPECT_TRUE(torch::equal(ours_in.grad(), aten_in.grad()))
        << (ours_in.grad() - aten_in.grad()).abs().max().item<double>();
    if (p == 0.0) {
      EXPECT_LT(max_rel(ours, reference(base.to(torch::kDouble), H)), 2e-6);
    }
  }
}

TEST(Attention, NonContiguousInputIsRead) {
  // A transposed view holds the same values as its contiguous copy: same result.
  auto qkv = torch::randn({2, 3 * 32, 16}).transpose(1, 2);
  ASSERT_FALSE(qkv.is_contiguous());
  EXPECT_TRUE(torch::equal(models::causal_self_attention(qkv, 1, 0.0),
                           models::causal_self_attention(qkv.contiguous(), 1, 0.0)));
}

TEST(Attention, BadShapesNameTheShape) {
  try {
    models::causal_self_attention(torch::randn({2, 8, 100}), 4, 0.0);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 8, 100]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(models::causal_self_attention(torch::randn({8, 96}), 1, 0.0), UsageError);
  EXPECT_THROW(models::causal_self_attention(torch::randn({2, 8, 96}), 3, 0.0), UsageError);  // C = 32, 3 heads
}

TEST(Attention, RunsUnderInferenceModeAndNoGrad) {
  // Serving code runs forwards under InferenceMode or NoGradGuard: no graph, same values.
  auto qkv = torch::randn({2, 9, 3 * 32});
  auto want = models::causal_self_attention(qkv, 2, 0.0);
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(models::causal_self_attention(qkv, 2, 0.0), want));
  }
  c10::InferenceMode inference;
  auto fresh = qkv.clone();  // an inference tensor
  EXPECT_TRUE(torch::equal(models::causal_self_attention(fresh, 2, 0.0), want));
}

}  // namespace
