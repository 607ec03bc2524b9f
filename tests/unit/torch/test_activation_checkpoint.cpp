// Activation checkpointing (models/activation_checkpoint.h) against the same model without it:
// the parameter gradients bit for bit (torch::equal) on CPU, for the GPT with dropout, a
// ResNet with BatchNorm, a module of one's own, and under bf16 autocast; and the peak of
// allocated bytes of a step (the counting CPU allocator, train/memory_stats.h) lower.
#include <gtest/gtest.h>

#include <cstdio>

#include <torch/torch.h>

#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/models/models.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/config.h>
#include <trainbox/train/memory_stats.h>
#include <trainbox/train/step.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {

models::ModelConfig gpt_config(const std::string& policy, std::int64_t every = 2) {
  models::ModelConfig c;
  c.name = "gpt";
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.dropout = 0.2;  // dropout draws: the recomputation must draw the same masks
  c.activation_checkpointing = policy;
  c.activation_checkpointing_every = every;
  return c;
}

models::ModelConfig resnet_config(const std::string& policy) {
  models::ModelConfig c;
  c.name = "resnet";
  c.width = 8;
  c.blocks = {2, 1};
  c.activation_checkpointing = policy;
  return c;
}

struct StepResult {
  torch::Tensor loss;
  std::vector<std::pair<std::string, torch::Tensor>> grads, buffers;
  torch::Tensor rng_after;  // the CPU generator's state after the step
};

// One training step of a freshly built model (same seed: same weights), data drawn from `seed`.
StepResult step(const models::ModelConfig& c, const models::InputShape& in, std::int64_t classes, bool amp = false) {
  torch::manual_seed(7);
  auto m = models::make_model(c, in, classes);
  m->train();
  torch::Tensor x, y;
  if (c.name == "gpt") {
    x = torch::randint(classes, {3, c.block_size}, torch::kLong);
    y = torch::randint(classes, {3, c.block_size}, torch::kLong);
  } else {
    x = torch::randn({4, in.channels, in.height, in.width});
    y = torch::randint(classes, {4}, torch::kLong);
  }
  StepResult r;
  {
    AutocastGuard ac(torch::kCPU, torch::kBFloat16, amp);
    r.loss = train::logits_cross_entropy(m->forward(x), y);
  }
  r.loss.backward();
  for (const auto& p : m->named_parameters()) r.grads.emplace_back(p.key(), p.value().grad().clone());
  for (const auto& b : m->named_buffers()) r.buffers.emplace_back(b.key(), b.value().clone());
  r.rng_after = at::globalContext().defaultGenerator(c10::Device(c10::kCPU)).get_state();
  return r;
}

void expect_equal(const StepResult& a, const StepResult& b) {
  EXPECT_TRUE(torch::equal(a.loss, b.loss)) << a.loss.item<double>() << " vs " << b.loss.item<double>();
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_EQ(a.grads[i].first, b.grads[i].first);
    ASSERT_TRUE(a.grads[i].second.defined()) << a.grads[i].first;
    ASSERT_TRUE(b.grads[i].second.defined()) << b.grads[i].first << " got no gradient";
    EXPECT_TRUE(torch::equal(a.grads[i].second, b.grads[i].second))
        << a.grads[i].first << ": max difference "
        << (a.grads[i].second - b.grads[i].second).abs().max().item<double>();
  }
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (std::size_t i = 0; i < a.buffers.size(); ++i)  // BatchNorm's statistics updated once, not twice
    EXPECT_TRUE(torch::equal(a.buffers[i].second, b.buffers[i].second)) << a.buffers[i].first;
  EXPECT_TRUE(torch::equal(a.rng_after, b.rng_after)) << "the generator is not left as without checkpointing";
}

TEST(ActivationCheckpoint, GptGradientsEqualBitForBitWithDropout) {
  const auto plain = step(gpt_config("none"), {}, 64);
  expect_equal(plain, step(gpt_config("blocks"), {}, 64));
  expect_equal(plain, step(gpt_config("every_k", 2), {}, 64));
  expect_equal(plain, step(gpt_config("every_k", 3), {}, 64));
}

TEST(ActivationCheckpoint, ResNetGradientsAndBatchNormStatisticsEqualBitForBit) {
  const models::InputShape in{3, 12, 12};
  const auto plain = step(resnet_config("none"), in, 5);
  expect_equal(plain, step(resnet_config("blocks"), in, 5));
}

TEST(ActivationCheckpoint, Bf16AutocastIsRecomputedUnderAutocast) {
  auto c = gpt_config("none");
  c.dropout = 0.1;
  const auto plain = step(c, {}, 64, /*amp=*/true);
  c.activation_checkpointing = "blocks";
  expect_equal(plain, step(c, {}, 64, /*amp=*/true));
}

TEST(ActivationCheckpoint, DropoutIsTorchDropoutAndItsMaskIsKeptForTheRecomputation) {
  // trainbox::dropout outside a unit: torch::dropout's values from the same generator state.
  auto x = torch::randn({4, 33});
  torch::manual_seed(5);
  auto want = torch::dropout(x, 0.3, true);
  torch::manual_seed(5);
  EXPECT_TRUE(torch::equal(trainbox::dropout(x, 0.3, true), want));
  EXPECT_TRUE(torch::equal(trainbox::dropout(x, 0.3, false), x));

  // Inside a checkpointed unit, with another random op after the dropout: the same gradient as
  // without checkpointing (the replayed mask leaves the generator where the draw left it).
  auto owner = torch::nn::Linear(33, 33);
  auto body = [&](const torch::Tensor& t) {
    auto d = trainbox::dropout(owner->forward(t), 0.3, true);
    return d * torch::rand_like(d);
  };
  auto grads = [&](bool ckpt) {
    torch::manual_seed(9);
    owner->zero_grad();
    auto in = x.clone().requires_grad_(true);
    (ckpt ? checkpoint(*owner, body, in) : body(in)).square().sum().backward();
    return std::make_pair(in.grad().clone(), owner->weight.grad().clone());
  };
  const auto plain = grads(false), ckpt = grads(true);
  EXPECT_TRUE(torch::equal(plain.first, ckpt.first));
  EXPECT_TRUE(torch::equal(plain.second, ckpt.second));

  // The recomputation takes the forward's masks, not new draws: one that asks for a mask the
  // forward did not draw is refused, naming the mask.
  int calls = 0;
  auto drifting = [&](const torch::Tensor& t) {
    const bool again = calls++ > 0;
    return trainbox::dropout(again ? owner->forward(t).narrow(1, 0, 5) : owner->forward(t), 0.3, true).sum(1);
  };
  auto in = x.clone().requires_grad_(true);
  auto y = checkpoint(*owner, drifting, in);
  try {
    y.sum().backward();
    FAIL() << "a recomputation that drew another mask was not refused";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("dropout mask 0 of shape [4, 5]"), std::string::npos) << e.what();
  }
}

// A module of one's own, marked two ways: checkpointed(block, x) in its forward, and the
// Checkpointed<Impl> type. Parameter names stay Impl's.
struct MyBlockImpl : torch::nn::Module {
  MyBlockImpl() {
    fc = register_module("fc", torch::nn::Linear(8, 8));
    bn = register_module("bn", torch::nn::BatchNorm1d(8));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + torch::dropout(torch::gelu(bn->forward(fc->forward(x))), 0.3, is_training());
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(MyBlock);

template <class B>
struct MyNet : torch::nn::Module {
  explicit MyNet(bool mark) : mark_(mark) {
    for (int i = 0; i < 3; ++i) blocks.push_back(register_module("b" + std::to_string(i), std::make_shared<B>()));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : blocks) x = mark_ ? checkpointed(b, x) : b->forward(x);
    return x;
  }
  bool mark_;
  std::vector<std::shared_ptr<B>> blocks;
};

template <class Net>
std::vector<torch::Tensor> own_module_grads(std::shared_ptr<Net> net, std::vector<std::string>* names) {
  torch::manual_seed(3);
  for (auto& p : net->parameters()) {
    torch::NoGradGuard ng;
    p.normal_();
  }
  auto x = torch::randn({5, 8});
  net->forward(x).square().sum().backward();
  std::vector<torch::Tensor> g;
  for (const auto& p : net->named_parameters()) {
    if (names) names->push_back(p.key());
    g.push_back(p.value().grad().clone());
  }
  return g;
}

TEST(ActivationCheckpoint, ModulesOfYourOwnMarkedByCallOrByType) {
  std::vector<std::string> names_plain, names_typed;
  const auto plain = own_module_grads(std::make_shared<MyNet<MyBlockImpl>>(false), &names_plain);
  const auto by_call = own_module_grads(std::make_shared<MyNet<MyBlockImpl>>(true), nullptr);
  const auto by_type = own_module_grads(std::make_shared<MyNet<Checkpointed<MyBlockImpl>>>(false), &names_typed);
  EXPECT_EQ(names_plain, names_typed);
  ASSERT_EQ(plain.size(), by_call.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain[i], by_call[i])) << names_plain[i];
    EXPECT_TRUE(torch::equal(plain[i], by_type[i])) << names_plain[i];
  }
}

TEST(ActivationCheckpoint, WithoutGradAUnitIsAPlainCall) {
  torch::manual_seed(1);
  auto m = models::make_model(gpt_config("blocks"), {}, 64);
  m->eval();
  torch::manual_seed(1);
  auto p = models::make_model(gpt_config("none"), {}, 64);
  p->eval();
  auto x = torch::randint(64, {2, 16}, torch::kLong);
  torch::NoGradGuard ng;
  EXPECT_TRUE(torch::equal(m->forward(x), p->forward(x)));
}

// The peak of allocated CPU bytes of one step beyond what lives before it, counted exactly.
std::int64_t activation_bytes(const models::ModelConfig& c) {
  torch::manual_seed(7);
  auto m = models::make_model(c, {}, 256);
  m->train();
  auto x = torch::randint(256, {8, c.block_size}, torch::kLong);
  auto y = torch::randint(256, {8, c.block_size}, torch::kLong);
  return train::measure_step_activation_bytes(*m, torch::kCPU,
                                              [&] { train::logits_cross_entropy(m->forward(x), y).backward(); });
}

TEST(ActivationCheckpoint, PeakActivationMemoryIsLower) {
  ASSERT_TRUE(train::install_cpu_allocation_counter());
  auto c = gpt_config("none");
  c.n_layer = 8;
  c.n_embd = 64;
  c.block_size = 64;
  const std::int64_t plain = activation_bytes(c);
  c.activation_checkpointing = "blocks";
  const std::int64_t blocks = activation_bytes(c);
  c.activation_checkpointing = "every_k";
  c.activation_checkpointing_every = 2;
  const std::int64_t every2 = activation_bytes(c);
  std::printf("peak activation bytes, gpt 8 layers: none %lld, every_k 2 %lld, blocks %lld (%.3f of none)\n",
              static_cast<long long>(plain), static_cast<long long>(every2), static_cast<long long>(blocks),
              double(blocks) / double(plain));
  EXPECT_GT(plain, 0);
  EXPECT_LT(blocks, every2);
  EXPECT_LT(every2, plain);
  // 8 blocks: what is kept is 8 block inputs and one block's activations during its recomputation
  EXPECT_LT(double(blocks), 0.5 * double(plain));
}

TEST(ActivationCheckpoint, CountingAllocatorCountsExactly) {
  ASSERT_TRUE(train::install_cpu_allocation_counter());
  const auto before = train::allocated(torch::kCPU);
  ASSERT_TRUE(before.exact);
  train::reset_peak_allocated(torch::kCPU);
  {
    auto a = torch::empty({1000}, torch::kFloat);  // 4000 bytes
    auto b = torch::empty({250}, torch::kDouble);  // 2000 bytes
    EXPECT_EQ(train::allocated(torch::kCPU).current - before.current, 6000);
  }
  const auto after = train::allocated(torch::kCPU);
  EXPECT_EQ(after.current, before.current);
  EXPECT_EQ(after.peak - before.current, 6000);
}

TEST(ActivationCheckpoint, ConfigKeysAndUnknownPolicy) {
  auto c = train::parse_config(
      "[model]\nname = \"gpt\"\nactivation_checkpointing = \"every_k\"\nactivation_checkpointing_every = 3\n"
      "[data]\ndataset = \"text\"\n",
      "t.toml");
  EXPECT_EQ(models::checkpoint_every(c.model), 3);
  try {
    train::parse_config("[model]\nactivation_checkpointing = \"layers\"\n", "t.toml");
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("none, blocks, every_k"), std::string::npos) << e.what();
  }
  c.train.cuda_graphs = true;  // the recomputation's CUDA generator state cannot be captured
  EXPECT_THROW(train::validate(c), ConfigError);
  models::ModelConfig m;
  m.activation_checkpointing = "all";
  EXPECT_THROW(models::checkpoint_every(m), ConfigError);
  EXPECT_EQ(models::checkpoint_every(models::ModelConfig{}), 0);
}

}  // namespace
