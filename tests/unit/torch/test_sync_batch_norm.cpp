// model.sync_batchnorm (models.h: sync_batch_norm): its own arithmetic against ATen's
// BatchNorm (outputs, input and parameter gradients, running statistics), and two "ranks"
// whose statistics are summed against one process holding both halves of the batch. The
// 2-process DDP run against 1 process is tests/integration/image_train.sh part 4.
#include <gtest/gtest.h>

#include <array>
#include <barrier>
#include <thread>

#include <torch/torch.h>

#include <trainbox/models/models.h>

using namespace trainbox;

namespace {

std::shared_ptr<models::Model> resnet(std::uint64_t seed) {
  torch::manual_seed(seed);
  models::ModelConfig c;
  c.name = "resnet18";
  return models::make_model(c, {3, 32, 32}, 4);
}

torch::Tensor first_grads(models::Model& m, const torch::Tensor& x, const torch::Tensor& y) {
  m.zero_grad();
  torch::nn::functional::cross_entropy(m.forward(x), y).backward();
  std::vector<torch::Tensor> g;
  for (auto& p : m.parameters()) g.push_back(p.grad().flatten());
  return torch::cat(g);
}

std::vector<torch::Tensor> buffers(models::Model& m) {
  std::vector<torch::Tensor> b;
  for (auto& t : m.buffers()) b.push_back(t.clone());
  return b;
}

}  // namespace

TEST(SyncBatchNorm, OneProcessEqualsATenBatchNorm) {
  auto plain = resnet(1), synced = resnet(1);
  EXPECT_EQ(models::sync_batch_norm(*synced, {}), 20);  // resnet18: 17 + 3 downsample BatchNorms
  const auto x = torch::randn({6, 3, 32, 32}), y = torch::tensor({0, 1, 2, 3, 0, 1});
  plain->train(), synced->train();
  const auto a = plain->forward(x), b = synced->forward(x);
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max().item<double>();
  // ATen accumulates in float32, this in float64: the gradients agree to float rounding,
  // relative to the largest (measured: 3.4e-5 absolute of a largest ~1).
  const auto ga = first_grads(*plain, x, y), gb = first_grads(*synced, x, y);
  const double rel = ((ga - gb).abs().max() / ga.abs().max()).item<double>();
  EXPECT_LT(rel, 1e-4) << rel;
  const auto ba = buffers(*plain), bb = buffers(*synced);
  ASSERT_EQ(ba.size(), bb.size());
  for (std::size_t i = 0; i < ba.size(); ++i)
    EXPECT_TRUE(torch::allclose(ba[i].to(torch::kDouble), bb[i].to(torch::kDouble), 1e-4, 1e-6)) << "buffer " << i;
  plain->eval(), synced->eval();  // evaluation: ATen's code with running statistics equal to rounding
  const auto ea = plain->forward(x), eb = synced->forward(x);
  EXPECT_TRUE(torch::allclose(ea, eb, 1e-4, 1e-5)) << (ea - eb).abs().max().item<double>();
}

// Two ranks as two threads: the sum is a real exchange between them (both halves' tensors,
// added in rank order), in forward and in backward. Their outputs together are the whole
// batch's, and their gradients add up to the whole batch's (the loss summed over samples:
// DDP's average of the two is then the whole's mean-loss gradient).
TEST(SyncBatchNorm, TwoRanksTogetherFollowTheWholeBatch) {
  const auto x = torch::randn({8, 3, 32, 32}), y = torch::tensor({0, 1, 2, 3, 3, 2, 1, 0});
  const auto sum_loss = torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum);
  auto whole = resnet(2);
  models::sync_batch_norm(*whole, {});
  whole->train();
  const auto out_whole = whole->forward(x);
  torch::nn::functional::cross_entropy(out_whole, y, sum_loss).backward();

  std::barrier sync(2);
  std::array<torch::Tensor, 2> slot;
  std::array<std::shared_ptr<models::Model>, 2> rank = {resnet(2), resnet(2)};
  std::array<torch::Tensor, 2> out;
  std::array<int, 2> calls{};
  auto run = [&](int r) {
    models::sync_batch_norm(*rank[r], [&, r](torch::Tensor& t) {
      slot[r] = t.clone();
      sync.arrive_and_wait();
      t.copy_(slot[0] + slot[1]);
      sync.arrive_and_wait();  // both have read the slots before either writes again
      ++calls[r];
    });
    rank[r]->train();
    out[r] = rank[r]->forward(x.slice(0, 4 * r, 4 * r + 4));
    torch::nn::functional::cross_entropy(out[r], y.slice(0, 4 * r, 4 * r + 4), sum_loss).backward();
  };
  std::thread other(run, 1);
  run(0);
  other.join();

  EXPECT_EQ(calls[0], 40);  // 20 BatchNorms: one sum forward, one backward
  EXPECT_EQ(calls[1], 40);
  EXPECT_TRUE(torch::allclose(torch::cat({out[0], out[1]}), out_whole, 1e-4, 1e-5))
      << (torch::cat({out[0], out[1]}) - out_whole).abs().max().item<double>();
  const auto pw = whole->parameters(), p0 = rank[0]->parameters(), p1 = rank[1]->parameters();
  for (std::size_t i = 0; i < pw.size(); ++i) {
    const auto together = p0[i].grad() + p1[i].grad();
    // float32 rounding, relative to the largest gradient of the tensor (measured: ≤ 1.4e-6)
    const double rel = ((together - pw[i].grad()).abs().max() / pw[i].grad().abs().max()).item<double>();
    EXPECT_LT(rel, 1e-5) << "parameter " << i;
  }
  const auto bw = buffers(*whole), b0 = buffers(*rank[0]);  // the running statistics: the whole batch's
  for (std::size_t i = 0; i < bw.size(); ++i)
    EXPECT_TRUE(torch::allclose(bw[i].to(torch::kDouble), b0[i].to(torch::kDouble), 1e-4, 1e-6)) << "buffer " << i;
}

TEST(SyncBatchNorm, AModelWithoutBatchNormReachesNone) {
  models::ModelConfig c;
  c.name = "cnn";
  auto m = models::make_model(c, {1, 28, 28}, 10);
  EXPECT_EQ(models::sync_batch_norm(*m, {}), 0);
}
