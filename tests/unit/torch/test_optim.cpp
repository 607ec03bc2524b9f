// The fused optimizers against LibTorch's reference implementations, and the schedules.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include <trainbox/train/optim.h>

using namespace trainbox::train;

namespace {
// Runs `steps` updates with the same gradients through ours and the reference; returns the max abs difference.
template <class Ref>
double compare(const OptimConfig& cfg, Ref&& make_ref, int steps = 6) {
  torch::manual_seed(0);
  auto init = torch::randn({16, 8});
  auto a = init.clone().requires_grad_(), b = init.clone().requires_grad_();
  Optimizer ours({a}, cfg);
  auto ref = make_ref(std::vector<torch::Tensor>{b});
  for (int i = 0; i < steps; ++i) {
    auto g = torch::randn({16, 8});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    ours.step();
    ref.step();
  }
  return (a - b).abs().max().item<double>();
}
}  // namespace

TEST(Optim, AdamMatchesLibTorch) {
  OptimConfig c;
  c.name = "adam";
  c.lr = 1e-2;
  c.weight_decay = 1e-3;
  EXPECT_LT(compare(c,
                    [&](auto p) {
                      return torch::optim::Adam(p, torch::optim::AdamOptions(c.lr).weight_decay(c.weight_decay));
                    }),
            1e-6);
}

TEST(Optim, AdamWMatchesLibTorch) {
  OptimConfig c;
  c.name = "adamw";
  c.lr = 1e-2;
  c.weight_decay = 0.05;
  EXPECT_LT(compare(c,
                    [&](auto p) {
                      return torch::optim::AdamW(p, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
                    }),
            1e-6);
}

TEST(Optim, SgdNesterovMatchesLibTorch) {
  OptimConfig c;
  c.name = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 1e-4;
  EXPECT_LT(
      compare(c,
              [&](auto p) {
                return torch::optim::SGD(
                    p, torch::optim::SGDOptions(c.lr).momentum(c.momentum).nesterov(true).weight_decay(c.weight_decay));
              }),
      1e-6);
}

TEST(Optim, PlainSgdMatchesLibTorch) {
  OptimConfig c;
  c.name = "sgd";
  c.lr = 0.05;
  EXPECT_LT(compare(c, [&](auto p) { return torch::optim::SGD(p, torch::optim::SGDOptions(c.lr)); }), 1e-7);
}

TEST(Optim, SetLrTakesEffect) {
  OptimConfig c;
  c.name = "sgd";
  c.lr = 1.0;
  auto p = torch::ones({2}).requires_grad_();
  Optimizer o({p}, c);
  p.mutable_grad() = torch::ones({2});
  o.set_lr(0.25);
  o.step();
  EXPECT_FLOAT_EQ(p[0].item<float>(), 0.75f);
}

TEST(Optim, ClipGradNormScalesToMaxNorm) {
  auto p = torch::zeros({2}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});  // norm 5
  auto n = clip_grad_norm({p}, 1.0);
  EXPECT_FLOAT_EQ(n.item<float>(), 5.0f);
  EXPECT_NEAR(p.grad().norm().item<float>(), 1.0f, 1e-5);
}

// A stage's flat shards hold the same gradient elements cut otherwise: the clipped gradients
// must be those of the per-parameter ones, bit for bit (sharded runs follow plain DDP's).
// 20 draws of sizes and cuts: a float32 sum of the tensors' norms differs between cuts in most.
TEST(Optim, ClipGradNormDoesNotDependOnHowGradientsAreCut) {
  torch::manual_seed(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<torch::Tensor> grads;
    for (int k = 0; k < 6; ++k) grads.push_back(torch::randn({torch::randint(1, 5000, {1}).item<int64_t>()}) * (k + 1));
    const auto flat = torch::cat(grads);
    auto as_params = [](const std::vector<torch::Tensor>& gs) {
      std::vector<torch::Tensor> ps;
      for (const auto& g : gs) {
        ps.push_back(torch::zeros_like(g).requires_grad_());
        ps.back().mutable_grad() = g.clone();
      }
      return ps;
    };
    auto whole = as_params(grads);
    const int64_t n = flat.numel(), a = n / 3 + trial, b = 2 * n / 3 - trial;  // three shards
    auto shards = as_params({flat.slice(0, 0, a), flat.slice(0, a, b), flat.slice(0, b, n)});
    const auto nw = clip_grad_norm(whole, 1.0), ns = clip_grad_norm(shards, 1.0);
    ASSERT_EQ(nw.item<float>(), ns.item<float>()) << "trial " << trial;
    std::vector<torch::Tensor> gw, gs;
    for (const auto& p : whole) gw.push_back(p.grad());
    for (const auto& p : shards) gs.push_back(p.grad());
    ASSERT_TRUE(torch::equal(torch::cat(gw), torch::cat(gs))) << "trial " << trial;
  }
}

TEST(Schedule, WarmupStepCosine) {
  ScheduleConfig s;
  s.warmup_steps = 4;
  LrSchedule constant(s, 1.0, 100, 10);
  EXPECT_DOUBLE_EQ(constant.lr(0), 0.25);
  EXPECT_DOUBLE_EQ(constant.lr(3), 1.0);
  EXPECT_DOUBLE_EQ(constant.lr(50), 1.0);
  s.name = "cosine";
  s.min_lr = 0.1;
  LrSchedule cosine(s, 1.0, 104, 10);
  EXPECT_NEAR(cosine.lr(4), 1.0, 1e-12);
  EXPECT_NEAR(cosine.lr(54), 0.55, 1e-12);
  EXPECT_NEAR(cosine.lr(104), 0.1, 1e-12);
  s = {};
  s.name = "step";
  s.step_epochs = 2;
  s.gamma = 0.5;
  LrSchedule step(s, 1.0, 100, 10);
  EXPECT_DOUBLE_EQ(step.lr(19), 1.0);
  EXPECT_DOUBLE_EQ(step.lr(20), 0.5);
  EXPECT_DOUBLE_EQ(step.lr(45), 0.25);
}

// The graph-safe step path against the eager one, as the trainer's CUDA-graph mode runs it:
// warm-up steps on the first batch undone by a StateSnapshot, then one bound step (what a
// graph captures) called once per batch with the gradients written in place, vs plain
// step()s. Any host-side state frozen at binding (a "first step" flag, say) shows up as
// different weights. SGD+Nesterov is the case that once trained wrong: the captured step
// carried is_first_step = true and wiped the momentum on every replay.
namespace {
double replay_vs_eager(const OptimConfig& cfg, int steps = 50) {
  torch::manual_seed(1);
  auto init = torch::randn({16, 8});
  std::vector<torch::Tensor> grads_seq;
  for (int i = 0; i < steps; ++i) grads_seq.push_back(torch::randn({16, 8}));

  auto eager = init.clone().requires_grad_();
  Optimizer e({eager}, cfg);
  for (int i = 0; i < steps; ++i) {
    eager.mutable_grad().copy_(grads_seq[i]);
    e.step();
    e.set_lr(cfg.lr * (i % 2 ? 1.0 : 0.5));  // a schedule between steps must reach the bound step too
  }

  auto graph = init.clone().requires_grad_();
  Optimizer g({graph}, cfg);
  {
    StateSnapshot snap({graph}, g);
    for (int i = 0; i < 3; ++i) {  // warm-up on batch 0, as CudaGraphStep does
      graph.mutable_grad().copy_(grads_seq[0]);
      g.step();
    }
    snap.restore({graph}, g);
  }
  auto replay = g.bound_step();  // "capture"
  for (int i = 0; i < steps; ++i) {
    graph.mutable_grad().copy_(grads_seq[i]);  // static input buffers, written in place
    replay();
    g.set_lr(cfg.lr * (i % 2 ? 1.0 : 0.5));
  }
  return (eager - graph).abs().max().item<double>();
}
}  // namespace

TEST(Optim, GraphSafeStepEqualsEagerSgdNesterov) {
  OptimConfig c;
  c.name = "sgd";
  c.lr = 0.05;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 1e-4;
  EXPECT_EQ(replay_vs_eager(c), 0.0);
}

TEST(Optim, GraphSafeStepEqualsEagerAdamW) {
  OptimConfig c;
  c.name = "adamw";
  c.lr = 1e-2;
  c.weight_decay = 0.05;
  EXPECT_EQ(replay_vs_eager(c), 0.0);
}

TEST(Optim, GraphSafeStepEqualsEagerPlainSgd) {
  OptimConfig c;
  c.name = "sgd";
  c.lr = 0.05;
  EXPECT_EQ(replay_vs_eager(c), 0.0);
}

// Momentum really accumulates: after two steps with gradients g1, g2 the buffer is
// 0.9·g1 + g2 (torch.optim.SGD), not g2 (what a replayed "first step" would leave).
TEST(Optim, SgdMomentumAccumulatesThroughBoundStep) {
  OptimConfig c;
  c.name = "sgd";
  c.lr = 1.0;
  c.momentum = 0.9;
  auto p = torch::zeros({1}).requires_grad_();
  Optimizer o({p}, c);
  auto step = o.bound_step();
  p.mutable_grad().fill_(1.0);
  step();  // buf = 1, p = -1
  p.mutable_grad().fill_(2.0);
  step();  // buf = 0.9 + 2 = 2.9, p = -3.9
  EXPECT_NEAR(p.item<double>(), -3.9, 1e-6);
}
