// GradScaler and AutocastGuard on CPU (the same ATen kernels run on CUDA).
#include <gtest/gtest.h>

#include <limits>

#include <torch/torch.h>

#include <trainbox/train/amp.h>

using trainbox::AutocastGuard;
using trainbox::GradScaler;
using trainbox::GradScalerOptions;

namespace {
torch::Tensor param_with_grad(std::vector<float> g) {
  auto p = torch::zeros({static_cast<long>(g.size())}, torch::requires_grad());
  p.mutable_grad() = torch::tensor(g);
  return p;
}
}  // namespace

TEST(GradScaler, InfGradientSkipsTheStepAndBacksOff) {
  GradScaler s;  // init 65536, backoff 0.5
  auto p = param_with_grad({1.0f, std::numeric_limits<float>::infinity()});
  (void)s.scale(torch::ones({}));
  bool called = false;
  EXPECT_FALSE(s.step({p}, [&] { called = true; }));
  EXPECT_FALSE(called);
  s.update();
  EXPECT_EQ(s.get_scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, NanGradientIsAlsoSkipped) {
  GradScaler s;
  auto p = param_with_grad({std::numeric_limits<float>::quiet_NaN()});
  (void)s.scale(torch::ones({}));
  EXPECT_FALSE(s.step({p}, [] {}));
}

TEST(GradScaler, CleanStepsGrowTheScaleAfterTheInterval) {
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler s(o);
  (void)s.scale(torch::ones({}));
  for (int i = 0; i < 3; ++i) {
    auto p = param_with_grad({65536.0f * 2});
    int calls = 0;
    EXPECT_TRUE(s.step({p}, [&] { ++calls; }));
    EXPECT_EQ(calls, 1);
    EXPECT_FLOAT_EQ(p.grad()[0].item<float>(), 2.0f * (65536.0f / float(s.get_scale())));  // unscaled
    s.update();
    EXPECT_EQ(s.get_scale(), i < 2 ? 65536.0 : 131072.0) << "after clean step " << i + 1;
  }
}

TEST(GradScaler, ScaleMultipliesTheLossAndStateRoundTrips) {
  GradScaler s;
  EXPECT_FLOAT_EQ(s.scale(torch::full({}, 0.5f)).item<float>(), 32768.0f);
  GradScaler t;
  t.load_state({1024.0, 7.0});
  EXPECT_EQ(t.get_scale(), 1024.0);
  EXPECT_EQ(t.growth_tracker(), 7);
}

TEST(GradScaler, DisabledIsAPassThrough) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler s(o);
  auto loss = torch::full({}, 3.0f);
  EXPECT_TRUE(s.scale(loss).equal(loss));
  bool called = false;
  EXPECT_TRUE(s.step({param_with_grad({std::numeric_limits<float>::infinity()})}, [&] { called = true; }));
  EXPECT_TRUE(called);
}

TEST(Autocast, GuardCastsInsideAndRestoresOutside) {
  auto a = torch::randn({8, 8}), b = torch::randn({8, 8});
  {
    AutocastGuard g(torch::kCPU, torch::kBFloat16);
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat32);
  {
    AutocastGuard off(torch::kCPU, torch::kBFloat16, /*enabled=*/false);
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat32);
  }
}
