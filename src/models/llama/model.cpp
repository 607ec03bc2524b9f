// The llama family's modules, forward, KV cache and generation (models/llama.h).
#include <trainbox/models/llama.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <limits>
#include <numbers>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/models/lora.h>
#include <trainbox/models/packing.h>
#include <trainbox/util/errors.h>

namespace trainbox::models {
namespace {

namespace nn = torch::nn;
using torch::Tensor;

constexpr double kInitStd = 0.02;  // transformers' initializer_range default

// The sizes of one llama, resolved from its config (llama.h: the defaults of 0).
struct Dims {
  std::int64_t vocab, hidden, layers, heads, kv_heads, head_dim, ffn;
  std::int64_t experts = 0, top_k = 0, expert_ffn = 0;  // a mixture of experts (0 experts: dense MLPs)
};

Dims dims_of(const ModelConfig& c, std::int64_t vocab) {
  Dims d{vocab,      c.n_embd,           c.n_layer, c.n_head, c.n_kv_head > 0 ? c.n_kv_head : c.n_head,
         c.head_dim, c.intermediate_size};
  if (d.head_dim == 0 && d.heads > 0) d.head_dim = d.hidden / d.heads;
  if (d.ffn == 0) d.ffn = (8 * d.hidden / 3 + 63) / 64 * 64;
  if (c.moe_experts > 0) {
    d.experts = c.moe_experts;
    d.top_k = c.moe_top_k;
    d.expert_ffn = c.moe_intermediate_size > 0 ? c.moe_intermediate_size : d.ffn;
  }
  return d;
}

// Linear and Embedding whose tensors start uninitialised: init_weights draws them (transformers'
// normal(0, 0.02)), or a checkpoint fills them (SkipInitGuard) without a draw first. LibTorch's own
// modules draw in their constructors (a serial uniform_ kernel: most of a 7B model's start-up).
// A LoRA adapter (models/lora.h) adds its low-rank term to the output when attached.
class LinearImpl : public nn::Module, public LoraHost {
 public:
  LinearImpl(std::int64_t in, std::int64_t out, bool with_bias) {
    weight = register_parameter("weight", torch::empty({out, in}));
    if (with_bias) bias = register_parameter("bias", torch::empty({out}));
  }
  Tensor forward(const Tensor& x) {
    auto y = torch::linear(x, weight, bias);
    return has_adapter() ? add_adapter(x, y, is_training()) : y;
  }
  Tensor weight, bias;
};
TORCH_MODULE(Linear);

class EmbeddingImpl : public nn::Module {
 public:
  EmbeddingImpl(std::int64_t rows, std::int64_t width) {
    weight = register_parameter("weight", torch::empty({rows, width}));
  }
  Tensor forward(const Tensor& ids) { return torch::embedding(weight, ids); }
  Tensor weight;
};
TORCH_MODULE(Embedding);

// LlamaRMSNorm: fp32 statistics, the weight applied after casting back.
class RmsNormImpl : public nn::Module {
 public:
  RmsNormImpl(std::int64_t n, double eps) : eps_(eps) { weight = register_parameter("weight", torch::ones({n})); }
  Tensor forward(const Tensor& x) {
    auto h = x.to(torch::kFloat);
    h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight * h.to(x.scalar_type());
  }
  Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

// RoPE's inverse frequencies as transformers computes them (modeling_rope_utils): default, linear, llama3.
Tensor inv_freq(const ModelConfig& c, std::int64_t dim) {
  auto idx = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat);
  auto inv = 1.0 / torch::pow(c.rope_theta, idx / static_cast<double>(dim));
  if (c.rope_scaling == "linear") return inv / c.rope_factor;
  if (c.rope_scaling != "llama3") return inv;
  const double old = static_cast<double>(c.rope_original_max_position);
  const double low_wavelen = old / c.rope_low_freq_factor, high_wavelen = old / c.rope_high_freq_factor;
  auto wavelen = 2 * std::numbers::pi / inv;
  auto scaled = torch::where(wavelen > low_wavelen, inv / c.rope_factor, inv);
  auto smooth = (old / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / c.rope_factor + smooth * scaled;
  auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

// cos and sin [T, head_dim] (fp32) of positions `pos` [T] ([B, T, head_dim] for positions [B, T]
// of a packed batch), the two halves equal (rotate-half layout).
struct Rope {
  Tensor cos, sin;
};
Rope rope_at(const Tensor& inv, const Tensor& pos) {
  auto freqs = pos.to(torch::kFloat).unsqueeze(-1) * inv.to(pos.device());
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}
Tensor rotate_half(const Tensor& x) {
  const auto h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}
// x [B, heads, T, D] rotated by positions whose cos/sin are [T, D] (or [B, T, D]: per row).
Tensor apply_rope(const Tensor& x, const Rope& r) {
  auto cos = r.cos.to(x.scalar_type()), sin = r.sin.to(x.scalar_type());
  if (cos.dim() == 3) cos = cos.unsqueeze(1), sin = sin.unsqueeze(1);
  return x * cos + rotate_half(x) * sin;
}

// One layer's keys and values so far, [1, kv_heads, capacity, D], the first `len` positions filled.
struct LayerCache {
  Tensor k, v;
  std::int64_t len = 0;
};

// The positions a query may attend to: the causal mask, with Mistral's sliding window
// (key positions within `window` of the query's). Undefined when is_causal alone says it.
Tensor attention_mask(const Tensor& qpos, const Tensor& kpos, std::int64_t window, bool plain_causal) {
  if (window <= 0 && plain_causal) return {};
  auto q = qpos.unsqueeze(1), k = kpos.unsqueeze(0);
  auto allowed = k <= q;
  if (window > 0) allowed = allowed.logical_and(q - k < window);
  return allowed;
}

class AttentionImpl : public nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const Dims& d) : d_(d), window_(c.sliding_window) {
    auto lin = [](std::int64_t in, std::int64_t out, bool bias) { return Linear(in, out, bias); };
    q_proj = register_module("q_proj", lin(d.hidden, d.heads * d.head_dim, c.qkv_bias));
    k_proj = register_module("k_proj", lin(d.hidden, d.kv_heads * d.head_dim, c.qkv_bias));
    v_proj = register_module("v_proj", lin(d.hidden, d.kv_heads * d.head_dim, c.qkv_bias));
    o_proj = register_module("o_proj", lin(d.heads * d.head_dim, d.hidden, c.o_bias));
    if (c.qk_norm) {
      q_norm = register_module("q_norm", RmsNorm(d.head_dim, c.norm_eps));
      k_norm = register_module("k_norm", RmsNorm(d.head_dim, c.norm_eps));
    }
  }

  // x [B, T, hidden] at positions `pos` [T]; with a cache, its keys and values come first and
  // this call's are appended. A packed batch (models/packing.h) brings its own mask `docs`
  // [B, 1, T, T]: each token attends to the earlier tokens of its own document.
  Tensor forward(const Tensor& x, const Rope& rope, const Tensor& pos, LayerCache* cache, const Tensor& docs = {}) {
    const auto B = x.size(0), T = x.size(1);
    auto heads = [&](Linear& proj, std::int64_t n, RmsNorm& norm) {
      auto t = proj->forward(x).view({B, T, n, d_.head_dim});
      if (norm) t = norm->forward(t);
      return t.transpose(1, 2);
    };
    auto q = apply_rope(heads(q_proj, d_.heads, q_norm), rope);
    auto k = apply_rope(heads(k_proj, d_.kv_heads, k_norm), rope);
    RmsNorm none{nullptr};
    auto v = heads(v_proj, d_.kv_heads, none);
    Tensor kpos = pos;
    if (cache) {
      const auto end = cache->len + T;
      cache->k.narrow(2, cache->len, T).copy_(k);
      cache->v.narrow(2, cache->len, T).copy_(v);
      cache->len = end;
      k = cache->k.narrow(2, 0, end);
      v = cache->v.narrow(2, 0, end);
      kpos = torch::arange(end, pos.options());
    }
    const bool square = k.size(2) == T;  // no earlier keys: is_causal says the whole mask
    auto mask = docs.defined() ? docs : attention_mask(pos, kpos, window_, square);
    if (!square && !mask.defined() && T > 1) mask = attention_mask(pos, kpos, 0, false);
    auto y = at::scaled_dot_product_attention(q, k, v, mask.defined() ? std::optional<Tensor>(mask) : std::nullopt, 0.0,
                                              /*is_causal=*/square && !mask.defined(), std::nullopt,
                                              /*enable_gqa=*/d_.kv_heads != d_.heads);
    return o_proj->forward(y.transpose(1, 2).reshape({B, T, d_.heads * d_.head_dim}));
  }

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  Dims d_;
  std::int64_t window_;
};
TORCH_MODULE(Attention);

class MlpImpl : public nn::Module {
 public:
  explicit MlpImpl(const Dims& d) {
    auto lin = [](std::int64_t in, std::int64_t out) { return Linear(in, out, false); };
    gate_proj = register_module("gate_proj", lin(d.hidden, d.ffn));
    up_proj = register_module("up_proj", lin(d.hidden, d.ffn));
    down_proj = register_module("down_proj", lin(d.ffn, d.hidden));
  }
  Tensor forward(const Tensor& x) {
    return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
  }
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

// Whether a mixture of experts carries Mixtral's names (block_sparse_moe, experts.E.w1/w3/w2) rather
// than Qwen3-MoE's (mlp, experts.E.gate_proj/up_proj/down_proj): the architecture it was read as, else
// the one its attention names (Qwen3's q/k norms).
bool mixtral_layout(const ModelConfig& c) {
  if (!c.hf_architecture.empty()) return c.hf_architecture == "MixtralForCausalLM";
  return !c.qk_norm;
}

// One expert: a SwiGLU MLP under the layout's names.
class ExpertImpl : public nn::Module {
 public:
  ExpertImpl(std::int64_t hidden, std::int64_t ffn, bool mixtral) {
    gate = register_module(mixtral ? "w1" : "gate_proj", Linear(hidden, ffn, false));
    up = register_module(mixtral ? "w3" : "up_proj", Linear(hidden, ffn, false));
    down = register_module(mixtral ? "w2" : "down_proj", Linear(ffn, hidden, false));
  }
  Tensor forward(const Tensor& x) { return down->forward(torch::silu(gate->forward(x)) * up->forward(x)); }
  Linear gate{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(Expert);

// The sparse MoE block, as transformers' MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock compute it:
// router logits x·gateᵀ; softmax in fp32; the top-k experts per token, their weights renormalised
// to sum to 1 when norm_topk (Mixtral always); each expert's SwiGLU on the tokens routed to it, scaled
// by its weight and summed per token. Dropless: every routed token is computed. Qwen3-MoE casts the
// weights back to the logits' dtype before scaling, Mixtral scales in fp32; both sum in x's dtype.
// In training it keeps what the load-balancing loss needs (the softmax and the tokens per expert)
// and counts the tokens each expert received (the metrics' load).
class SparseMoeImpl : public nn::Module {
 public:
  SparseMoeImpl(const ModelConfig& c, const Dims& d, bool mixtral)
      : experts_(d.experts), top_k_(d.top_k), norm_topk_(c.moe_norm_topk), mixtral_(mixtral) {
    gate = register_module("gate", Linear(d.hidden, d.experts, false));
    auto list = register_module("experts", nn::ModuleList());
    for (std::int64_t e = 0; e < d.experts; ++e) {
      experts.push_back(Expert(d.hidden, d.expert_ffn, mixtral));
      list->push_back(experts.back());
    }
    routed_ = torch::zeros({d.experts}, torch::kLong);
  }

  Tensor forward(const Tensor& x) {
    const auto H = x.size(-1);
    auto flat = x.reshape({-1, H});
    auto logits = gate->forward(flat);  // [N, E]
    auto probs = torch::softmax(logits.to(torch::kFloat), -1);
    auto [weights, chosen] = probs.topk(top_k_, -1);  // [N, k]
    if (norm_topk_) weights = weights / weights.sum(-1, /*keepdim=*/true);
    if (!mixtral_) weights = weights.to(logits.scalar_type());
    // The (token, slot) pairs grouped by expert, tokens ascending within each: one gather, one
    // matmul chain per expert that received tokens, one scatter-add back. The counts and whether the
    // logits are finite come to the host in one transfer.
    auto slots = chosen.reshape({-1});
    auto order = std::get<1>(slots.sort(std::optional<bool>(true), /*dim=*/0, /*descending=*/false));
    auto host = torch::cat({torch::bincount(slots, {}, experts_).to(torch::kLong),
                            torch::isfinite(logits.detach()).all().logical_not().to(torch::kLong).reshape({1})})
                    .to(torch::kCPU);
    auto counts = host.narrow(0, 0, experts_);
    if (host[experts_].item<std::int64_t>() != 0 && !warned_) {
      // Named once; the loss that follows is not finite, and the trainer's usual handling (GradScaler's
      // skipped step, the divergence stop) takes it from there.
      warned_ = true;
      std::fprintf(stderr, "trainbox: warning: %s: the router's logits are not finite (NaN/inf reached this layer)\n",
                   name_.c_str());
    }
    auto tokens = order.div(top_k_, "floor");
    auto xs = flat.index_select(0, tokens);
    auto ws = weights.reshape({-1}).index_select(0, order).unsqueeze(1);
    std::vector<Tensor> outs;
    const auto* n = counts.data_ptr<std::int64_t>();
    for (std::int64_t e = 0, at = 0; e < experts_; at += n[e], ++e)
      if (n[e] > 0) outs.push_back(experts[static_cast<std::size_t>(e)]->forward(xs.narrow(0, at, n[e])));
    auto y = (torch::cat(outs) * ws).to(flat.scalar_type());
    auto out = torch::zeros_like(flat).index_add(0, tokens, y);
    if (is_training()) {
      routed_ += counts;
      last_probs_ = probs;
      last_counts_ = counts;
    }
    return out.view(x.sizes());
  }

  // The last training forward's softmax [N, E] (fp32, in the graph) and tokens per expert [E].
  const Tensor& last_probs() const { return last_probs_; }
  const Tensor& last_counts() const { return last_counts_; }
  // Tokens routed to each expert since the last take [E].
  Tensor take_routed() {
    auto r = routed_.clone();
    routed_.zero_();
    return r;
  }
  void forget() { last_probs_ = last_counts_ = Tensor(); }
  void set_name(std::string n) { name_ = std::move(n); }

  Linear gate{nullptr};
  std::vector<Expert> experts;

 private:
  std::int64_t experts_, top_k_;
  bool norm_topk_, mixtral_, warned_ = false;
  std::string name_;
  Tensor routed_, last_probs_, last_counts_;
};
TORCH_MODULE(SparseMoe);

class DecoderLayerImpl : public nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& c, const Dims& d, std::int64_t index) {
    self_attn = register_module("self_attn", Attention(c, d));
    if (d.experts > 0) {
      const bool mixtral = mixtral_layout(c);
      moe = register_module(mixtral ? "block_sparse_moe" : "mlp", SparseMoe(c, d, mixtral));
      moe->set_name(fmt::format("model.layers.{}.{}", index, mixtral ? "block_sparse_moe" : "mlp"));
    } else {
      mlp = register_module("mlp", Mlp(d));
    }
    input_layernorm = register_module("input_layernorm", RmsNorm(d.hidden, c.norm_eps));
    post_attention_layernorm = register_module("post_attention_layernorm", RmsNorm(d.hidden, c.norm_eps));
  }
  Tensor forward(Tensor x, const Rope& rope, const Tensor& pos, LayerCache* cache, const Tensor& docs = {}) {
    x = x + self_attn->forward(input_layernorm->forward(x), rope, pos, cache, docs);
    auto h = post_attention_layernorm->forward(x);
    return x + (moe ? moe->forward(h) : mlp->forward(h));
  }
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
  SparseMoe moe{nullptr};
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// LlamaModel: what transformers names `model.`.
class BackboneImpl : public nn::Module {
 public:
  BackboneImpl(const ModelConfig& c, const Dims& d) {
    embed_tokens = register_module("embed_tokens", Embedding(d.vocab, d.hidden));
    layers = register_module("layers", nn::ModuleList());
    for (std::int64_t i = 0; i < d.layers; ++i) {
      blocks.push_back(DecoderLayer(c, d, i));
      layers->push_back(blocks.back());
      mark_unit(*blocks.back());  // activation checkpointing's and ZeRO stage 3's unit
    }
    norm = register_module("norm", RmsNorm(d.hidden, c.norm_eps));
  }
  Embedding embed_tokens{nullptr};
  nn::ModuleList layers{nullptr};
  std::vector<DecoderLayer> blocks;
  RmsNorm norm{nullptr};
};
TORCH_MODULE(Backbone);

class Llama : public Model {
 public:
  Llama(const ModelConfig& c, const Dims& d)
      : d_(d),
        tied_(c.tie_embeddings),
        checkpoint_every_(checkpoint_every(c)),
        window_(c.sliding_window),
        aux_coef_(c.moe_aux_loss && d.experts > 0 ? c.moe_aux_loss_coef : 0),
        inv_freq_(inv_freq(c, d.head_dim)) {
    model_ = register_module("model", Backbone(c, d));
    if (!tied_) lm_head_ = register_module("lm_head", Linear(d.hidden, d.vocab, false));
    init_weights();
  }

  Tensor forward(Tensor idx) override {
    // A packed batch (models/packing.h): positions per document, attention within each document.
    Tensor pos, docs;
    if (is_packed(idx)) {
      Tensor starts;
      std::tie(idx, starts) = unpack(idx);
      pos = document_positions(starts);
      docs = document_mask(pos, window_);
    }
    check_ids(idx);
    if (!pos.defined()) pos = torch::arange(idx.size(1), idx.options().dtype(torch::kLong));
    const Rope rope = rope_at(inv_freq_, pos);
    aux_ = Tensor();
    auto x = model_->embed_tokens->forward(idx);
    for (std::size_t i = 0; i < model_->blocks.size(); ++i) {
      auto* layer = model_->blocks[i].ptr().get();
      if (layer->moe) layer->moe->forget();
      const bool recompute = checkpoints_block(checkpoint_every_, static_cast<std::int64_t>(i));
      x = run_unit(
          *layer, [layer, rope, pos, docs](const Tensor& t) { return layer->forward(t, rope, pos, nullptr, docs); }, x,
          recompute);
    }
    if (aux_coef_ > 0 && is_training()) aux_ = aux_coef_ * load_balancing_loss();
    return head(model_->norm->forward(x));
  }

  Tensor auxiliary_loss() const override { return aux_; }

  Tensor take_routing_counts() override {
    if (d_.experts == 0) return {};
    std::vector<Tensor> rows;
    for (auto& b : model_->blocks) rows.push_back(b->moe->take_routed());
    return torch::stack(rows);
  }

  // Positions cache[0].len … of `idx` [1, T] through the layers with the cache; logits [1, T, vocab].
  Tensor forward_cached(const Tensor& idx, std::vector<LayerCache>& cache) {
    const auto start = cache.front().len;
    auto pos = torch::arange(start, start + idx.size(1), idx.options().dtype(torch::kLong));
    const Rope rope = rope_at(inv_freq_, pos);
    auto x = model_->embed_tokens->forward(idx);
    for (std::size_t i = 0; i < model_->blocks.size(); ++i) x = model_->blocks[i]->forward(x, rope, pos, &cache[i]);
    return head(model_->norm->forward(x));
  }

  std::vector<LayerCache> empty_cache(std::int64_t capacity) {
    const auto w = model_->embed_tokens->weight;
    std::vector<LayerCache> cache(model_->blocks.size());
    for (auto& c : cache) {
      c.k = torch::empty({1, d_.kv_heads, capacity, d_.head_dim}, w.options());
      c.v = torch::empty_like(c.k);
    }
    return cache;
  }

  std::vector<std::pair<std::string, std::string>> tied_weights() const override {
    if (!tied_) return {};
    return {{"lm_head.weight", "model.embed_tokens.weight"}};
  }
  const Dims& dims() const { return d_; }

 private:
  // transformers' load_balancing_loss_func over every layer's router (Switch Transformer, eqs. 4-6):
  // E · Σ_e f_e · P_e, f_e the share of the (layer, token) rows that chose expert e among their top k,
  // P_e the mean router probability of e over the same rows. Computed in fp32.
  Tensor load_balancing_loss() {
    Tensor counts, probs;
    std::int64_t rows = 0;
    for (auto& b : model_->blocks) {
      const auto& p = b->moe->last_probs();
      if (!p.defined()) return {};
      counts = counts.defined() ? counts + b->moe->last_counts() : b->moe->last_counts().clone();
      probs = probs.defined() ? probs + p.sum(0) : p.sum(0);
      rows += p.size(0);
    }
    const auto share = counts.to(probs.device(), torch::kFloat) / static_cast<double>(rows);
    return static_cast<double>(d_.experts) * (share * (probs / static_cast<double>(rows))).sum();
  }
  Tensor head(const Tensor& h) { return tied_ ? torch::linear(h, model_->embed_tokens->weight) : lm_head_->forward(h); }
  void check_ids(const Tensor& idx) const {
    if (idx.dim() != 2 || idx.size(1) < 1)
      throw UsageError(
          fmt::format(
              "llama takes token ids of shape [batch, time] (or a packed batch [batch, 2, time]), got {} dimensions",
              idx.dim()),
          "pass an int64 tensor [B, T] with T >= 1");
  }
  void init_weights() {
    if (SkipInitGuard::active()) return;  // every tensor is about to be loaded (model.init_from)
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* l = m->as<LinearImpl>()) {
        nn::init::normal_(l->weight, 0.0, kInitStd);
        if (l->bias.defined()) nn::init::zeros_(l->bias);
      } else if (auto* e = m->as<EmbeddingImpl>()) {
        nn::init::normal_(e->weight, 0.0, kInitStd);
      }
    }
  }

  Dims d_;
  bool tied_;
  std::int64_t checkpoint_every_;
  std::int64_t window_;  // sliding_window (Mistral), for a packed batch's document mask
  double aux_coef_;      // the load-balancing loss's coefficient (0: none)
  Tensor aux_;           // the last training forward's coef · load-balancing loss
  Tensor inv_freq_;      // not a buffer: transformers does not save it either
  Backbone model_{nullptr};
  Linear lm_head_{nullptr};
};

Llama& as_llama(Model& m) {
  auto* l = dynamic_cast<Llama*>(&m);
  if (!l)
    throw UsageError("generation with a KV cache needs a llama model", "load a model.name = \"llama\" checkpoint");
  return *l;
}

// The next token from the last position's logits (fp32, CPU): greedy, or temperature → top-k →
// top-p (transformers' warpers, in that order) → a draw with `gen`.
std::int64_t pick(Tensor logits, const GenerateOptions& o, torch::Generator& gen) {
  if (o.temperature == 0) return logits.argmax().item<std::int64_t>();
  logits = logits / o.temperature;
  const auto ninf = -std::numeric_limits<float>::infinity();
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    auto kth = std::get<0>(logits.topk(o.top_k)).select(0, o.top_k - 1);
    logits = logits.masked_fill(logits < kth, ninf);
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = logits.sort(/*dim=*/0, /*descending=*/false);
    auto cum = sorted.softmax(0).cumsum(0);
    auto remove = cum <= (1 - o.top_p);
    remove.index_put_({-1}, false);  // keep at least the most likely token
    logits = logits.scatter(0, order, sorted.masked_fill(remove, ninf));
  }
  return torch::multinomial(logits.softmax(0), 1, /*replacement=*/false, gen).item<std::int64_t>();
}

void check_generate_options(const GenerateOptions& o) {
  if (o.new_tokens < 0) throw UsageError(fmt::format("cannot generate {} tokens", o.new_tokens), "pass 0 or more");
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw UsageError(fmt::format("temperature must be >= 0, got {}", o.temperature), "e.g. 0.7; 0 is greedy");
  if (o.top_k < 0) throw UsageError(fmt::format("top_k must be >= 0, got {}", o.top_k), "0 keeps every token");
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw UsageError(fmt::format("top_p must be in (0, 1], got {}", o.top_p), "e.g. 0.9; 1 keeps every token");
}

}  // namespace

std::shared_ptr<Model> make_llama(const ModelConfig& c, std::int64_t vocab) {
  if (c.vocab_size > 0) vocab = c.vocab_size;
  const Dims d = dims_of(c, vocab);
  if (d.vocab < 1 || d.hidden < 1 || d.layers < 1 || d.heads < 1 || d.kv_heads < 1 || d.head_dim < 1 || d.ffn < 1)
    throw ConfigError(
        fmt::format("llama needs positive sizes, got vocab_size = {}, n_embd = {}, n_layer = {}, n_head = "
                    "{}, n_kv_head = {}, head_dim = {}, intermediate_size = {}",
                    d.vocab, d.hidden, d.layers, d.heads, d.kv_heads, d.head_dim, d.ffn),
        "set the model.* sizes, or model.init_from = a Hugging Face folder with its config.json");
  if (d.heads % d.kv_heads != 0)
    throw ConfigError(fmt::format("model.n_head = {} is not a multiple of model.n_kv_head = {}", d.heads, d.kv_heads),
                      "grouped-query attention shares each key/value head among n_head / n_kv_head query heads");
  if (d.experts > 0 && (d.top_k < 1 || d.top_k > d.experts || d.expert_ffn < 1))
    throw ConfigError(fmt::format("a mixture of {} experts cannot route each token to {} of them (model.moe.top_k), "
                                  "with experts {} wide (model.moe.intermediate_size)",
                                  d.experts, d.top_k, d.expert_ffn),
                      "set model.moe.top_k between 1 and model.moe.experts, and a positive width");
  if (d.experts > 0 && c.activation_checkpointing != "none")
    throw ConfigError(
        fmt::format("model.activation_checkpointing = \"{}\" with a mixture of experts is not supported yet",
                    c.activation_checkpointing),
        "set model.activation_checkpointing = \"none\": a checkpointed layer returns one tensor, and the router's "
        "logits are a second output");
  if (d.head_dim % 2 != 0)
    throw ConfigError(fmt::format("model.head_dim = {} is odd; RoPE rotates pairs", d.head_dim),
                      "use an even head_dim");
  if (c.head_dim == 0 && d.hidden % d.heads != 0)
    throw ConfigError(fmt::format("model.n_embd = {} is not divisible by model.n_head = {}", d.hidden, d.heads),
                      "set model.head_dim, or an n_embd that n_head divides");
  return std::make_shared<Llama>(c, d);
}

bool is_llama(const Model& m) { return dynamic_cast<const Llama*>(&m) != nullptr; }

std::pair<torch::Tensor, torch::Tensor> llama_rope_table(const ModelConfig& c, std::int64_t positions) {
  const Dims d = dims_of(c, std::max<std::int64_t>(c.vocab_size, 1));
  const Rope r = rope_at(inv_freq(c, d.head_dim), torch::arange(positions, torch::kLong));
  return {r.cos, r.sin};
}

torch::Tensor generate_llama(Model& model, torch::Tensor prompt, const GenerateOptions& o, torch::Generator gen,
                             const std::function<void(std::int64_t)>& on_token) {
  auto& llama = as_llama(model);
  check_generate_options(o);
  if (prompt.dim() != 1 || prompt.size(0) < 1)
    throw UsageError("the prompt must be a non-empty list of token ids", "pass at least one token");
  torch::NoGradGuard no_grad;
  const bool was_training = llama.is_training();
  llama.eval();
  const auto w = llama.parameters().front();
  auto ids = prompt.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<std::int64_t> out(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
  const auto vocab = llama.dims().vocab;
  for (auto id : out)
    if (id < 0 || id >= vocab)
      throw UsageError(fmt::format("prompt token {} is outside the model's vocabulary (0 to {})", id, vocab - 1),
                       "pass ids of this model's tokenizer");
  std::vector<LayerCache> cache;
  if (o.kv_cache) cache = llama.empty_cache(static_cast<std::int64_t>(out.size()) + o.new_tokens);
  auto next_logits = [&](std::size_t fed) {  // logits after the tokens out[fed…]
    const auto n = static_cast<std::int64_t>(out.size());
    auto ctx = torch::from_blob(out.data() + fed, {1, n - static_cast<std::int64_t>(fed)}, torch::kLong).to(w.device());
    auto y = o.kv_cache ? llama.forward_cached(ctx, cache) : llama.forward(ctx);
    return y.select(1, -1).squeeze(0).to(torch::kCPU, torch::kFloat);
  };
  try {
    std::size_t fed = 0;
    for (std::int64_t i = 0; i < o.new_tokens; ++i) {
      auto logits = next_logits(fed);
      if (o.kv_cache) fed = out.size();
      out.push_back(pick(logits, o, gen));
      if (on_token) on_token(out.back());
      if (std::find(o.eos_ids.begin(), o.eos_ids.end(), out.back()) != o.eos_ids.end()) break;
    }
  } catch (...) {
    llama.train(was_training);
    throw;
  }
  llama.train(was_training);
  return torch::tensor(out, torch::kLong);
}

}  // namespace trainbox::models
