// The built-in GPT (shapes, names, context limit, sampling) and strict weight loading.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "temp_dir.h"
#include <trainbox/io/safetensors.h>
#include <trainbox/models/gpt.h>
#include <trainbox/models/models.h>
#include <trainbox/models/weights.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {
using test::TempDir;

models::ModelConfig tiny_gpt(std::int64_t n_layer = 2) {
  models::ModelConfig c;
  c.name = "gpt";
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  return c;
}

std::shared_ptr<models::Model> build(const models::ModelConfig& c, std::int64_t vocab = 32) {
  return models::make_model(c, {}, vocab);
}

// The error text of a call that must throw DataError.
template <typename F>
std::string data_error_of(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_FALSE(e.hint().empty());
    return e.what();
  }
  ADD_FAILURE() << "no DataError";
  return {};
}

// Writes {name: tensor} (F32) as safetensors.
void write_f32(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::vector<torch::Tensor> keep;
  std::vector<io::TensorView> views;
  for (const auto& [name, t] : tensors) {
    keep.push_back(t.detach().to(torch::kFloat).contiguous());
    views.push_back({name, io::DType::kF32, keep.back().sizes().vec(), keep.back().data_ptr(), keep.back().nbytes()});
  }
  io::write_safetensors(path, views);
}

}  // namespace

TEST(Gpt, ForwardGivesLogitsForEveryPosition) {
  auto gpt = build(tiny_gpt());
  auto logits = gpt->forward(torch::randint(32, {3, 8}, torch::kLong));
  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{3, 8, 32}));
  // causal: the first position's logits do not depend on later tokens
  gpt->eval();
  auto a = torch::randint(32, {1, 8}, torch::kLong), b = a.clone();
  b[0][7] = (b[0][7].item<std::int64_t>() + 1) % 32;
  EXPECT_TRUE(torch::allclose(gpt->forward(a).slice(1, 0, 7), gpt->forward(b).slice(1, 0, 7)));
  EXPECT_FALSE(torch::allclose(gpt->forward(a).select(1, 7), gpt->forward(b).select(1, 7)));
}

TEST(Gpt, NamesAreNanoGptsAndTheHeadIsTiedOnce) {
  auto gpt = build(tiny_gpt(1));
  std::set<std::string> params;
  for (const auto& p : gpt->named_parameters()) params.insert(p.key());
  const std::set<std::string> expected = {"transformer.wte.weight",
                                          "transformer.wpe.weight",
                                          "transformer.h.0.ln_1.weight",
                                          "transformer.h.0.ln_1.bias",
                                          "transformer.h.0.attn.c_attn.weight",
                                          "transformer.h.0.attn.c_attn.bias",
                                          "transformer.h.0.attn.c_proj.weight",
                                          "transformer.h.0.attn.c_proj.bias",
                                          "transformer.h.0.ln_2.weight",
                                          "transformer.h.0.ln_2.bias",
                                          "transformer.h.0.mlp.c_fc.weight",
                                          "transformer.h.0.mlp.c_fc.bias",
                                          "transformer.h.0.mlp.c_proj.weight",
                                          "transformer.h.0.mlp.c_proj.bias",
                                          "transformer.ln_f.weight",
                                          "transformer.ln_f.bias"};
  EXPECT_EQ(params, expected);  // lm_head.weight is not a second parameter: the optimizer sees wte once
  auto sd = models::state_dict(*gpt);
  ASSERT_EQ(sd.back().first, "lm_head.weight");  // ... but PyTorch's state_dict name is there
  EXPECT_TRUE(sd.back().second.is_same(gpt->named_parameters()["transformer.wte.weight"]));

  auto no_bias = tiny_gpt(1);
  no_bias.bias = false;
  auto nb = build(no_bias);
  for (const auto& p : nb->named_parameters()) EXPECT_FALSE(p.key().ends_with(".bias")) << p.key();
  EXPECT_EQ(nb->forward(torch::zeros({1, 4}, torch::kLong)).sizes(), (std::vector<std::int64_t>{1, 4, 32}));
}

TEST(Gpt, Gpt2Initialisation) {
  torch::manual_seed(0);
  auto c = tiny_gpt(4);
  c.n_embd = 64;
  auto gpt = models::make_model(c, {}, 512);
  auto p = gpt->named_parameters();
  auto std_of = [&](const std::string& n) { return p[n].std().item<double>(); };
  EXPECT_NEAR(std_of("transformer.wte.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("transformer.h.0.attn.c_attn.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("transformer.h.0.mlp.c_fc.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("transformer.h.3.mlp.c_proj.weight"), 0.02 / std::sqrt(8.0), 0.001);
  EXPECT_NEAR(std_of("transformer.h.3.attn.c_proj.weight"), 0.02 / std::sqrt(8.0), 0.001);
  EXPECT_EQ(p["transformer.h.0.attn.c_attn.bias"].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(p["transformer.ln_f.weight"].sum().item<double>(), 64.0);
}

TEST(Gpt, LongerThanTheContextIsAUsageError) {
  auto gpt = build(tiny_gpt());
  try {
    gpt->forward(torch::zeros({1, 9}, torch::kLong));
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("block_size = 8"), std::string::npos) << e.what();
  }
}

TEST(Gpt, BadSizesAreConfigErrors) {
  auto c = tiny_gpt();
  c.n_embd = 15;
  EXPECT_THROW(build(c), ConfigError);
  c = tiny_gpt();
  c.vocab_size = 16;  // below the dataset's 32
  EXPECT_THROW(build(c, 32), ConfigError);
  EXPECT_THROW(models::vocab_size_for(tiny_gpt(), 0), ConfigError);
  c.vocab_size = 64;  // padded beyond the dataset's
  EXPECT_EQ(models::vocab_size_for(c, 32), 64);
  EXPECT_EQ(build(c, 32)->forward(torch::zeros({1, 2}, torch::kLong)).size(2), 64);
}

TEST(Gpt, GenerateIsDeterministicForASeed) {
  torch::manual_seed(1);
  auto gpt = build(tiny_gpt());
  gpt->train();
  auto prompt = torch::tensor(std::vector<std::int64_t>{1, 2, 3}, torch::kLong);
  auto run = [&](std::uint64_t seed, std::int64_t top_k) {
    return models::generate(*gpt, prompt, 20, 1.0, top_k, at::detail::createCPUGenerator(seed));
  };
  auto a = run(7, 0), b = run(7, 0), c = run(8, 0);
  ASSERT_EQ(a.numel(), 23);  // the prompt, then 20 tokens: more than block_size, so the context was cropped
  EXPECT_TRUE(torch::equal(a.slice(0, 0, 3), prompt));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c));
  EXPECT_TRUE(gpt->is_training());  // mode restored
  EXPECT_LT(a.max().item<std::int64_t>(), 32);

  // top_k = 1 is greedy: the argmax of the last position, whatever the seed
  auto g1 = run(1, 1), g2 = run(2, 1);
  EXPECT_TRUE(torch::equal(g1, g2));
  gpt->eval();
  torch::NoGradGuard ng;
  auto first = gpt->forward(prompt.unsqueeze(0)).select(1, -1).argmax(-1).item<std::int64_t>();
  EXPECT_EQ(g1[3].item<std::int64_t>(), first);

  // temperature 0 is greedy too (trainbox sample --temperature 0): top_k = 1's tokens, any seed
  auto t0 = models::generate(*gpt, prompt, 20, 0.0, 0, at::detail::createCPUGenerator(5));
  EXPECT_TRUE(torch::equal(t0, g1));
  EXPECT_THROW(models::generate(*gpt, prompt, 1, -0.5, 0, at::detail::createCPUGenerator(0)), UsageError);
  EXPECT_THROW(models::generate(*gpt, prompt, 1, 1.0, -1, at::detail::createCPUGenerator(0)), UsageError);
  models::ModelConfig mlp;
  auto not_gpt = models::make_model(mlp, {1, 28, 28}, 10);
  EXPECT_THROW(models::generate(*not_gpt, prompt, 1, 1.0, 0, at::detail::createCPUGenerator(0)), UsageError);
}

TEST(Weights, RoundTripIncludingTheTiedAlias) {
  TempDir dir;
  torch::manual_seed(2);
  auto a = build(tiny_gpt());
  models::save_weights(*a, dir.path + "/w.safetensors");
  std::set<std::string> names;
  for (const auto& e : io::read_safetensors_header(dir.path + "/w.safetensors")) names.insert(e.name);
  EXPECT_TRUE(names.count("lm_head.weight") && names.count("transformer.wte.weight"));

  torch::manual_seed(3);
  auto b = build(tiny_gpt());
  auto r = models::load_weights(*b, dir.path + "/w.safetensors");
  EXPECT_FALSE(r.hugging_face_layout);
  EXPECT_EQ(r.tensors, b->named_parameters().size());
  auto x = torch::randint(32, {2, 8}, torch::kLong);
  EXPECT_TRUE(torch::equal(a->forward(x), b->forward(x)));

  // the tied tensor under its alias alone (files that drop shared tensors) fills wte
  auto sd = models::state_dict(*a);
  std::vector<std::pair<std::string, torch::Tensor>> without_wte;
  for (auto& [n, t] : sd)
    if (n != "transformer.wte.weight") without_wte.emplace_back(n, t);
  write_f32(dir.path + "/alias.safetensors", without_wte);
  torch::manual_seed(4);
  auto c = build(tiny_gpt());
  models::load_weights(*c, dir.path + "/alias.safetensors");
  EXPECT_TRUE(torch::equal(a->forward(x), c->forward(x)));
}

TEST(Weights, StrictLoadNamesEveryMissingUnexpectedAndMismatchedKey) {
  TempDir dir;
  auto gpt = build(tiny_gpt());
  auto sd = models::state_dict(*gpt);
  std::vector<std::pair<std::string, torch::Tensor>> bad;
  for (auto& [n, t] : sd) {
    if (n == "transformer.h.1.ln_2.bias" || n == "transformer.ln_f.weight") continue;  // missing
    if (n == "transformer.wpe.weight")
      bad.emplace_back(n, torch::zeros({9, 16}));  // shape
    else
      bad.emplace_back(n, t);
  }
  bad.emplace_back("transformer.h.2.ln_1.weight", torch::ones({16}));  // unexpected
  bad.emplace_back("head.extra", torch::ones({2}));                    // unexpected
  write_f32(dir.path + "/bad.safetensors", bad);

  auto before = gpt->named_parameters()["transformer.h.0.attn.c_attn.weight"].clone();
  std::string msg = data_error_of([&] { models::load_weights(*gpt, dir.path + "/bad.safetensors"); });
  for (const char* s : {"2 missing", "transformer.h.1.ln_2.bias", "transformer.ln_f.weight", "2 unexpected",
                        "transformer.h.2.ln_1.weight", "head.extra", "1 with another shape",
                        "transformer.wpe.weight (file [9, 16], model [8, 16])"})
    EXPECT_NE(msg.find(s), std::string::npos) << s << " not in: " << msg;
  // all or nothing: nothing was copied
  EXPECT_TRUE(torch::equal(before, gpt->named_parameters()["transformer.h.0.attn.c_attn.weight"]));

  // a tied alias that disagrees with its owner
  std::vector<std::pair<std::string, torch::Tensor>> untied;
  for (auto& [n, t] : sd) untied.emplace_back(n, n == "lm_head.weight" ? t + 1 : t);
  write_f32(dir.path + "/untied.safetensors", untied);
  msg = data_error_of([&] { models::load_weights(*gpt, dir.path + "/untied.safetensors"); });
  EXPECT_NE(msg.find("lm_head.weight and transformer.wte.weight differ"), std::string::npos) << msg;

  // the wrong architecture altogether, and no file
  models::ModelConfig mlp;
  auto net = models::make_model(mlp, {1, 28, 28}, 10);
  msg = data_error_of([&] { models::load_weights(*net, dir.path + "/bad.safetensors"); });
  EXPECT_NE(msg.find("fc1.weight"), std::string::npos) << msg;
  data_error_of([&] { models::load_weights(*net, dir.path + "/nope.safetensors"); });
}

TEST(Weights, HuggingFaceConv1dLayoutIsTransposed) {
  TempDir dir;
  torch::manual_seed(5);
  auto gpt = build(tiny_gpt());
  std::vector<std::pair<std::string, torch::Tensor>> hf;
  for (auto& [n, t] : models::state_dict(*gpt)) {
    if (n == "lm_head.weight") continue;                              // HF files keep one of the tied pair
    std::string name = n.substr(std::string("transformer.").size());  // GPT2Model's names
    bool conv1d = n.ends_with("c_attn.weight") || n.ends_with("c_proj.weight") || n.ends_with("c_fc.weight");
    hf.emplace_back(name, conv1d ? t.t() : t);
  }
  hf.emplace_back("h.0.attn.bias", torch::ones({1, 1, 8, 8}));  // HF's causal-mask buffers
  hf.emplace_back("h.0.attn.masked_bias", torch::tensor(-1e4));
  write_f32(dir.path + "/hf.safetensors", hf);

  torch::manual_seed(6);
  auto b = build(tiny_gpt());
  auto r = models::load_weights(*b, dir.path + "/hf.safetensors");
  EXPECT_TRUE(r.hugging_face_layout);
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"h.0.attn.bias", "h.0.attn.masked_bias"}));
  auto x = torch::randint(32, {2, 8}, torch::kLong);
  EXPECT_TRUE(torch::equal(gpt->forward(x), b->forward(x)));

  // a mis-shaped Conv1D weight is reported in the model's orientation (one mismatch, so the
  // message's first few names hold it)
  auto bad = hf;
  for (auto& [n, t] : bad)
    if (n == "h.0.mlp.c_proj.weight") t = torch::zeros({64, 20});  // HF [in, out]: 20 outputs, the model has 16
  write_f32(dir.path + "/hf_bad.safetensors", bad);
  std::string msg = data_error_of([&] { models::load_weights(*b, dir.path + "/hf_bad.safetensors"); });
  EXPECT_NE(msg.find("Hugging Face"), std::string::npos) << msg;
  EXPECT_NE(msg.find("transformer.h.0.mlp.c_proj.weight (file [20, 64] after transposing Conv1D, model [16, 64])"),
            std::string::npos)
      << msg;
}
