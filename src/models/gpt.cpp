#include <trainbox/models/gpt.h>

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/models/attention.h>
#include <trainbox/util/errors.h>

namespace trainbox::models {
namespace {

namespace nn = torch::nn;

// GPT-2's init scale: normal(0, 0.02) everywhere, residual projections scaled down by
// 1/sqrt(2·n_layer) (two residual additions per block), so the residual stream's variance
// does not grow with depth (GPT-2 paper, section 2.3).
constexpr double kInitStd = 0.02;
// PyTorch's and GPT-2's LayerNorm epsilon.
constexpr double kLayerNormEps = 1e-5;

// nanoGPT's LayerNorm: like nn.LayerNorm, but the bias can be dropped alone (bias = false).
class LayerNormImpl : public nn::Module {
 public:
  LayerNormImpl(std::int64_t n, bool bias) {
    weight_ = register_parameter("weight", torch::ones({n}));
    if (bias) bias_ = register_parameter("bias", torch::zeros({n}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x, {weight_.size(0)}, weight_, bias_, kLayerNormEps);
  }

 private:
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(LayerNorm);

class CausalSelfAttentionImpl : public nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const ModelConfig& c) : n_head_(c.n_head), dropout_(c.dropout) {
    c_attn = register_module("c_attn", nn::Linear(nn::LinearOptions(c.n_embd, 3 * c.n_embd).bias(c.bias)));
    c_proj = register_module("c_proj", nn::Linear(nn::LinearOptions(c.n_embd, c.n_embd).bias(c.bias)));
    // nanoGPT's module tree; the dropouts themselves run through trainbox::dropout, whose mask
    // a checkpointed block keeps for its recomputation (activation_checkpoint.h)
    attn_dropout_ = register_module("attn_dropout", nn::Dropout(c.dropout));
    resid_dropout_ = register_module("resid_dropout", nn::Dropout(c.dropout));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = causal_self_attention(c_attn->forward(x), n_head_, is_training() ? dropout_ : 0.0);
    return trainbox::dropout(c_proj->forward(y), dropout_, is_training());
  }

  nn::Linear c_attn{nullptr}, c_proj{nullptr};

 private:
  std::int64_t n_head_;
  double dropout_;
  nn::Dropout attn_dropout_{nullptr}, resid_dropout_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public nn::Module {
 public:
  explicit MlpImpl(const ModelConfig& c) {
    c_fc = register_module("c_fc", nn::Linear(nn::LinearOptions(c.n_embd, 4 * c.n_embd).bias(c.bias)));
    c_proj = register_module("c_proj", nn::Linear(nn::LinearOptions(4 * c.n_embd, c.n_embd).bias(c.bias)));
    dropout_ = register_module("dropout", nn::Dropout(c.dropout));  // applied by trainbox::dropout, as above
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // exact (erf) GELU, as nanoGPT's nn.GELU(); see gpt.h
    return trainbox::dropout(c_proj->forward(torch::gelu(c_fc->forward(x))), dropout_->options.p(), is_training());
  }

  nn::Linear c_fc{nullptr}, c_proj{nullptr};

 private:
  nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public nn::Module {
 public:
  explicit BlockImpl(const ModelConfig& c) {
    ln_1 = register_module("ln_1", LayerNorm(c.n_embd, c.bias));
    attn = register_module("attn", CausalSelfAttention(c));
    ln_2 = register_module("ln_2", LayerNorm(c.n_embd, c.bias));
    mlp = register_module("mlp", Mlp(c));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(ln_1->forward(x));
    return x + mlp->forward(ln_2->forward(x));
  }

  LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

// nanoGPT's `transformer` ModuleDict, as a module: its children's names are the state_dict's.
class TransformerImpl : public nn::Module {
 public:
  TransformerImpl(const ModelConfig& c, std::int64_t vocab) {
    wte = register_module("wte", nn::Embedding(vocab, c.n_embd));
    wpe = register_module("wpe", nn::Embedding(c.block_size, c.n_embd));
    drop = register_module("drop", nn::Dropout(c.dropout));
    h = register_module("h", nn::ModuleList());
    for (std::int64_t i = 0; i < c.n_layer; ++i) {
      blocks.push_back(Block(c));
      h->push_back(blocks.back());
      mark_unit(*blocks.back());  // a unit: activation checkpointing's and ZeRO stage 3's
    }
    ln_f = register_module("ln_f", LayerNorm(c.n_embd, c.bias));
  }

  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::Dropout drop{nullptr};
  nn::ModuleList h{nullptr};
  std::vector<Block> blocks;  // h's elements, typed
  LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Transformer);

class Gpt : public Model {
 public:
  Gpt(const ModelConfig& c, std::int64_t vocab) : block_size_(c.block_size), checkpoint_every_(checkpoint_every(c)) {
    transformer_ = register_module("transformer", Transformer(c, vocab));
    init_weights(c.n_layer);
  }

  torch::Tensor forward(torch::Tensor idx) override {
    if (idx.dim() != 2)
      throw UsageError(fmt::format("gpt takes token ids of shape [batch, time], got {} dimensions", idx.dim()),
                       "pass an int64 tensor [B, T]");
    const auto T = idx.size(1);
    if (T > block_size_)
      throw UsageError(
          fmt::format("a sequence of {} tokens is longer than the model's context, block_size = {}", T, block_size_),
          "crop the input to the last block_size tokens, or build the model with a larger model.block_size");
    auto& t = *transformer_;
    auto pos = torch::arange(T, idx.options().dtype(torch::kLong));
    auto x = t.drop->forward(t.wte->forward(idx) + t.wpe->forward(pos));
    for (std::size_t i = 0; i < t.blocks.size(); ++i)  // model.activation_checkpointing: which blocks recompute
      x = unit(t.blocks[i], x, checkpoints_block(checkpoint_every_, static_cast<std::int64_t>(i)));
    x = t.ln_f->forward(x);
    return torch::linear(x, t.wte->weight);  // lm_head, tied to wte
  }

  std::vector<std::pair<std::string, std::string>> tied_weights() const override {
    return {{"lm_head.weight", "transformer.wte.weight"}};
  }

  std::int64_t block_size() const { return block_size_; }

 private:
  // GPT-2's initialisation, drawn in nanoGPT's order so that one torch seed gives the same
  // weights here and in bench/peers/models.py: the constructors above have drawn what
  // PyTorch's do (Embedding: normal; Linear: kaiming-uniform weight, uniform bias); nanoGPT
  // then builds lm_head = Linear(C, vocab) (a kaiming-uniform [vocab, C] draw) before tying
  // it to wte, and runs _init_weights over the modules in order, lm_head last (the shared
  // tensor is drawn twice), and finally re-draws every c_proj.weight with the scaled std.
  void init_weights(std::int64_t n_layer) {
    torch::NoGradGuard no_grad;
    namespace init = nn::init;
    auto& t = *transformer_;
    init::kaiming_uniform_(t.wte->weight, std::sqrt(5.0));  // nanoGPT's lm_head construction
    auto linear = [](nn::Linear& l) {
      init::normal_(l->weight, 0.0, kInitStd);
      if (l->bias.defined()) init::zeros_(l->bias);
    };
    init::normal_(t.wte->weight, 0.0, kInitStd);
    init::normal_(t.wpe->weight, 0.0, kInitStd);
    for (auto& b : t.blocks) {
      linear(b->attn->c_attn);
      linear(b->attn->c_proj);
      linear(b->mlp->c_fc);
      linear(b->mlp->c_proj);
    }
    init::normal_(t.wte->weight, 0.0, kInitStd);  // lm_head.weight: the same tensor
    const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(n_layer));
    for (auto& b : t.blocks) {
      init::normal_(b->attn->c_proj->weight, 0.0, proj_std);
      init::normal_(b->mlp->c_proj->weight, 0.0, proj_std);
    }
  }

  std::int64_t block_size_;
  std::int64_t checkpoint_every_;  // 0: none; K: blocks K, 2K, … (models/activation_checkpoint.h)
  Transformer transformer_{nullptr};
};

const Gpt& as_gpt(const Model& m) {
  const auto* g = dynamic_cast<const Gpt*>(&m);
  if (!g) throw UsageError("sampling needs a gpt model", "train or load a checkpoint with model.name = \"gpt\"");
  return *g;
}

}  // namespace

std::int64_t vocab_size_for(const ModelConfig& cfg, std::int64_t dataset_vocab) {
  if (cfg.vocab_size > 0) {
    if (dataset_vocab > cfg.vocab_size)
      throw ConfigError(fmt::format("model.vocab_size = {} is smaller than the dataset's vocabulary of {} tokens",
                                    cfg.vocab_size, dataset_vocab),
                        fmt::format("set model.vocab_size = 0 (the dataset's) or at least {}", dataset_vocab));
    return cfg.vocab_size;
  }
  if (dataset_vocab <= 0)
    throw ConfigError("the gpt model has no vocabulary size: model.vocab_size = 0 and the data gives none",
                      "set model.vocab_size (e.g. 256 for bytes, 50304 for GPT-2's tokens)");
  return dataset_vocab;
}

std::shared_ptr<Model> make_gpt(const ModelConfig& c, std::int64_t vocab) {
  if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.block_size < 1 || vocab < 1)
    throw ConfigError(
        fmt::format("gpt needs positive sizes, got n_layer = {}, n_head = {}, n_embd = {}, block_size = {}, vocab = {}",
                    c.n_layer, c.n_head, c.n_embd, c.block_size, vocab),
        "set model.n_layer, n_head, n_embd and block_size to at least 1");
  if (c.n_embd % c.n_head != 0)
    throw ConfigError(
        fmt::format("model.n_embd = {} is not divisible by model.n_head = {}", c.n_embd, c.n_head),
        fmt::format("choose n_embd a multiple of n_head (e.g. n_embd = {})", (c.n_embd / c.n_head + 1) * c.n_head));
  if (c.dropout < 0 || c.dropout >= 1)
    throw ConfigError(fmt::format("model.dropout = {} is not a probability below 1", c.dropout), "use 0 to 0.99");
  return std::make_shared<Gpt>(c, vocab);
}

std::int64_t block_size_of(const Model& gpt) { return as_gpt(gpt).block_size(); }

torch::Tensor generate(Model& gpt, torch::Tensor prompt_ids, std::int64_t new_tokens, double temperature,
                       std::int64_t top_k, torch::Generator gen, const std::function<void(std::int64_t)>& on_token) {
  const std::int64_t block = block_size_of(gpt);
  if (prompt_ids.dim() != 1 || prompt_ids.size(0) < 1)
    throw UsageError(fmt::format("the prompt must be a non-empty list of token ids, got shape {}",
                                 fmt::join(prompt_ids.sizes(), "x")),
                     "pass at least one token");
  if (new_tokens < 0) throw UsageError(fmt::format("cannot generate {} tokens", new_tokens), "pass 0 or more");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw UsageError(fmt::format("temperature must be >= 0, got {}", temperature),
                     "use e.g. 0.8 (lower: more conservative; 0: always the most likely token)");
  if (top_k < 0) throw UsageError(fmt::format("top_k must be >= 0, got {}", top_k), "0 keeps the whole vocabulary");

  torch::NoGradGuard no_grad;
  const bool was_training = gpt.is_training();
  gpt.eval();
  auto params = gpt.parameters();
  const torch::Device dev = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  auto ids = prompt_ids.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<std::int64_t> out(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
  out.reserve(out.size() + static_cast<std::size_t>(new_tokens));
  try {
    for (std::int64_t i = 0; i < new_tokens; ++i) {
      const auto n = static_cast<std::int64_t>(out.size());
      const auto start = std::max<std::int64_t>(0, n - block);  // the context is the last block_size tokens
      auto ctx = torch::from_blob(out.data() + start, {1, n - start}, torch::kLong).to(dev);
      // The last position's logits, in fp32 on the CPU: one CPU generator draws for every device.
      auto logits = gpt.forward(ctx).select(1, -1).squeeze(0).to(torch::kCPU, torch::kFloat);
      if (temperature == 0) {  // greedy: no draw
        out.push_back(logits.argmax().item<std::int64_t>());
        if (on_token) on_token(out.back());
        continue;
      }
      logits = logits / temperature;
      if (top_k > 0 && top_k < logits.size(0)) {
        auto kth = std::get<0>(logits.topk(top_k)).select(0, top_k - 1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      auto probs = torch::softmax(logits, 0);
      out.push_back(torch::multinomial(probs, 1, /*replacement=*/false, gen).item<std::int64_t>());
      if (on_token) on_token(out.back());
    }
  } catch (...) {
    gpt.train(was_training);
    throw;
  }
  gpt.train(was_training);
  return torch::tensor(out, torch::kLong);
}

}  // namespace trainbox::models
