// Packing (models/packing.h, data.packing): a packed window's positions, targets and attention
// keep its documents apart. The reference is each document run alone through the same llama:
// the packed row's per-token losses and gradients must equal the documents' (fp32, 1e-6).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include "temp_dir.h"
#include <trainbox/data/text.h>
#include <trainbox/models/config.h>
#include <trainbox/models/models.h>
#include <trainbox/models/packing.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {

std::string le32(std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  return {char(u), char(u >> 8), char(u >> 16), char(u >> 24)};
}

models::ModelConfig tiny_llama(std::int64_t window = 0) {
  models::ModelConfig c;
  c.name = "llama";
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;  // grouped-query: the mask must reach every query head
  c.n_embd = 32;
  c.intermediate_size = 48;
  c.block_size = 64;
  c.vocab_size = 50;
  c.sliding_window = window;
  return c;
}

// Per-token losses (reduction none, [T]) of ids [1, T+1] as input/target.
torch::Tensor token_losses(models::Model& m, const torch::Tensor& x, const torch::Tensor& y) {
  auto logits = m.forward(x);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), y.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone).ignore_index(-100));
}

std::vector<torch::Tensor> grads_of(models::Model& m) {
  std::vector<torch::Tensor> g;
  for (auto& p : m.parameters()) {
    g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    p.mutable_grad() = torch::Tensor();
  }
  return g;
}

void packed_equals_documents_alone(std::int64_t window) {
  torch::manual_seed(7);
  auto m = models::make_model(tiny_llama(window), {}, 50);
  // Three documents of 9, 14 and 6 tokens; the window of 24 inputs (and 24 targets) holds
  // them whole but the last token of the third (it is the window's 25th).
  const std::vector<std::int64_t> lens = {9, 14, 6};
  std::vector<torch::Tensor> docs;
  for (auto n : lens) docs.push_back(torch::randint(0, 50, {n}, torch::kLong));
  auto stream = torch::cat(docs);
  const std::int64_t T = 24;
  auto starts = torch::zeros({T + 1}, torch::kBool);
  std::int64_t at = 0;
  for (auto n : lens) {
    if (at <= T) starts[at] = true;
    at += n;
  }
  auto x = models::packed_input(stream.narrow(0, 0, T).unsqueeze(0), starts.narrow(0, 0, T).unsqueeze(0));
  auto y = stream.narrow(0, 1, T).clone().unsqueeze(0);
  y.masked_fill_(starts.narrow(0, 1, T).unsqueeze(0), -100);  // what TextSource does for a document start

  auto packed = token_losses(*m, x, y);
  packed.sum().backward();
  const auto packed_grads = grads_of(*m);

  // The same documents, one forward each (the third cut where the window ends).
  std::vector<torch::Tensor> alone;
  at = 0;
  torch::Tensor total;
  for (std::size_t d = 0; d < lens.size(); ++d) {
    const std::int64_t n = std::min(lens[d], T + 1 - at);  // inputs and targets inside the window
    auto ids = stream.narrow(0, at, n);
    auto l = token_losses(*m, ids.narrow(0, 0, n - 1).unsqueeze(0), ids.narrow(0, 1, n - 1).unsqueeze(0));
    alone.push_back(l);
    if (d + 1 < lens.size()) alone.push_back(torch::zeros({1}));  // the next document's start: not a target
    total = total.defined() ? total + l.sum() : l.sum();
    at += lens[d];
  }
  total.backward();
  const auto alone_grads = grads_of(*m);

  auto reference = torch::cat(alone);
  ASSERT_EQ(reference.numel(), T);
  EXPECT_LE((packed.detach() - reference.detach()).abs().max().item<double>(), 1e-6)
      << "packed " << packed << "\nalone " << reference;
  EXPECT_EQ(y.eq(-100).sum().item<std::int64_t>(), 2);
  for (std::size_t i = 0; i < packed_grads.size(); ++i)
    EXPECT_LE((packed_grads[i] - alone_grads[i]).abs().max().item<double>(), 1e-6) << "parameter " << i;
  // And the check can fail: without the document mask and positions, the same row leaks.
  auto leaky = token_losses(*m, x.select(1, 0), y);
  EXPECT_GT((leaky.detach() - reference).abs().max().item<double>(), 1e-3);
}

}  // namespace

TEST(Packing, PositionsRestartAtEachDocumentStart) {
  auto starts = torch::tensor({0, 0, 1, 0, 0, 0, 1, 1, 0}, torch::kBool).unsqueeze(0);
  auto pos = models::document_positions(starts);
  EXPECT_TRUE(pos.equal(torch::tensor({0, 1, 0, 1, 2, 3, 0, 0, 1}, torch::kLong).unsqueeze(0))) << pos;
  auto mask = models::document_mask(pos).squeeze();  // [T, T]
  EXPECT_TRUE(mask[1][0].item<bool>());
  EXPECT_FALSE(mask[2][1].item<bool>());  // a new document does not see the one before
  EXPECT_FALSE(mask[3][4].item<bool>());  // nor a later token of its own
  EXPECT_TRUE(mask[5][2].item<bool>());
  EXPECT_FALSE(mask[7][6].item<bool>());
  EXPECT_EQ(mask.sum().item<std::int64_t>(), 3 + 10 + 1 + 3);
  // A sliding window of 2: the token itself and the one before it.
  EXPECT_FALSE(models::document_mask(pos, 2).squeeze()[5][3].item<bool>());
  EXPECT_TRUE(models::document_mask(pos, 2).squeeze()[5][4].item<bool>());
}

TEST(Packing, PackedRowLossesAndGradientsEqualEachDocumentAlone) { packed_equals_documents_alone(0); }

TEST(Packing, PackedRowWithASlidingWindowEqualsEachDocumentAlone) { packed_equals_documents_alone(4); }

TEST(Packing, TextSourceGivesPositionsAndSkipsDocumentStartTargets) {
  test::TempDir d;
  // 40 tokens, documents starting at 0, 7, 15 and 31; the mask trains everything.
  std::string bin = le32(data::kTokenFileMagic) + le32(1) + le32(40);
  bin.resize(data::kTokenFileHeaderBytes, '\0');
  std::string m = le32(data::kMaskFileMagic) + le32(data::kMaskFileVersion) + le32(40);
  m.resize(data::kTokenFileHeaderBytes, '\0');
  for (int i = 0; i < 40; ++i) {
    bin += {char(i + 1), '\0'};
    m += char(data::kMaskTarget | (i == 0 || i == 7 || i == 15 || i == 31 ? data::kMaskDocStart : 0));
  }
  d.write("p.bin", bin);
  d.write("p.mask", m);
  data::DataConfig c;
  c.dataset = "text";
  c.path = d.path + "/p.bin";
  c.text_holdout = 0.4;
  c.packing = true;
  auto sp = data::load_text(c, 10);  // train: tokens 0..23, windows [0,11) and [10,21)
  auto b = sp.train->get_batch(torch::tensor({0, 1}, torch::kInt64));
  ASSERT_TRUE(models::is_packed(b.x)) << b.x.sizes();
  auto [ids, starts] = models::unpack(b.x);
  auto pos = models::document_positions(starts);
  EXPECT_TRUE(pos[0].equal(torch::tensor({0, 1, 2, 3, 4, 5, 6, 0, 1, 2}, torch::kLong))) << pos[0];
  EXPECT_TRUE(pos[1].equal(torch::tensor({0, 1, 2, 3, 4, 0, 1, 2, 3, 4}, torch::kLong))) << pos[1];
  EXPECT_EQ(ids[1][0].item<std::int64_t>(), 11);
  EXPECT_EQ(b.y[0][6].item<std::int64_t>(), -100);  // token 7 starts a document
  EXPECT_EQ(b.y[0][7].item<std::int64_t>(), 9);
  EXPECT_EQ(b.y[1][4].item<std::int64_t>(), -100);  // token 15
  EXPECT_EQ(b.y.eq(-100).sum().item<std::int64_t>(), 2);
  EXPECT_NE(sp.description.find("packed: 4 documents"), std::string::npos) << sp.description;

  // Without document starts, packing is refused, naming the file and the fix.
  d.write("p.mask", m.substr(0, data::kTokenFileHeaderBytes) + std::string(40, char(data::kMaskTarget)));
  try {
    data::load_text(c, 10);
    ADD_FAILURE() << "packing without document starts was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("marks no document start"), std::string::npos) << e.what();
  }
}
