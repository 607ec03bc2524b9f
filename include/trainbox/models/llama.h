// trainbox/models/llama.h — the Llama-family decoder (model.name = "llama"): Llama 2/3.x, Qwen2 /
// Qwen2.5, Qwen3 and Mistral from one implementation, its variant read from the checkpoint's
// config.json; generation with a KV cache; Hugging Face folders in and out.
//
// The architecture (src/models/llama/model.cpp), Hugging Face's LlamaForCausalLM and kin:
//   embed_tokens → n_layer × [x + o_proj(attn(RMSNorm(x))), x + down(silu(gate(h)) · up(h)), h = RMSNorm(x)]
//   → RMSNorm → lm_head (tied to embed_tokens with tie_embeddings).
//   attention  q [n_head], k and v [n_kv_head] heads of head_dim (grouped-query when n_kv_head < n_head);
//              Qwen3's per-head RMSNorm of q and k (qk_norm); Qwen2's q/k/v biases (qkv_bias);
//              RoPE on q and k in Hugging Face's rotate-half layout (the weights of a Hugging Face file
//              need no permutation), inv_freq as transformers computes it: default, linear, llama3;
//              softmax(q·kᵀ/√head_dim + causal mask [+ sliding window])·v through
//              at::scaled_dot_product_attention (flash / efficient kernels on CUDA; grouped-query
//              heads shared through enable_gqa, not copied).
//   RMSNorm    x · rsqrt(mean(x²) + eps) computed in fp32, then · weight, as LlamaRMSNorm.
// Parameter names are Hugging Face's (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight,
// …, model.norm.weight, lm_head.weight), so a save_pretrained folder loads with the strict loader
// (models/weights.h) unchanged and the export writes the names transformers reads.
// Units (activation checkpointing, ZeRO stage 3): each decoder layer.
// Initialisation from scratch as transformers' _init_weights: Linear and Embedding normal(0, 0.02),
// biases zero, norms one.
//
// Not supported, refused with a ConfigError naming the key (read_hf_config): rope types other than
// default/linear/llama3 (yarn, dynamic, longrope), partial rotary, per-layer sliding windows
// (Qwen's use_sliding_window), mlp_bias, activations other than silu (Gemma), Mixtral's router
// jitter, Qwen3-MoE's dense layers (decoder_sparse_step, mlp_only_layers), quantization_config.
//
// Mixture of experts (Mixtral, Qwen3-MoE; model.moe.*): every layer's MLP is a router (a Linear
// to the experts' logits, softmax in fp32, top-k, optionally renormalised) over SwiGLU experts,
// each token's output the weighted sum of its k experts' (dropless: every routed token computed).
// Stored per expert as on disk: block_sparse_moe.{gate, experts.E.w1/w3/w2} (Mixtral) or
// mlp.{gate, experts.E.gate_proj/up_proj/down_proj} (Qwen3-MoE). In training the model's
// auxiliary_loss() is transformers' load-balancing loss times model.moe.aux_loss_coef, and
// take_routing_counts() the tokens each expert received (docs/moe.md).
//
//   models::ModelConfig c; c.name = "llama";
//   auto notes = models::read_hf_config("Qwen3-0.6B", c);     // the folder's config.json → c
//   auto m = models::make_model(c, {}, 0);                      // vocab from c.vocab_size
//   models::load_weights(*m, "Qwen3-0.6B");                     // its safetensors (sharded too)
//   auto ids = models::generate_llama(*m, prompt, {.new_tokens = 64}, gen);
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include <trainbox/models/config.h>
#include <trainbox/models/models.h>

namespace trainbox::models {

// The architectures read_hf_config accepts (config.json's "architectures"[0]) and the model_type
// each is written back with.
struct HfArchitecture {
  std::string_view architecture, model_type;
};
inline constexpr HfArchitecture kLlamaArchitectures[] = {
    {"LlamaForCausalLM", "llama"},     {"Qwen2ForCausalLM", "qwen2"},     {"Qwen3ForCausalLM", "qwen3"},
    {"MistralForCausalLM", "mistral"}, {"MixtralForCausalLM", "mixtral"}, {"Qwen3MoeForCausalLM", "qwen3_moe"}};

// Fills the llama keys of `cfg` (and name = "llama", n_layer, n_head, n_embd, vocab_size) from the
// Hugging Face folder `dir`'s config.json, in either form transformers writes (v5's "dtype" and
// "rope_parameters", or the Hub's "torch_dtype", "rope_theta" and "rope_scaling"), and the EOS/BOS
// ids from generation_config.json when there is one. block_size is left as the config has it (the
// trained context), unless it is 0. Returns notes (e.g. the checkpoint's dtype). Throws DataError
// for a config.json that is missing or not JSON, ConfigError for an architecture or feature that
// is not supported (one line: the key, what is supported, the fix).
std::vector<std::string> read_hf_config(const std::string& dir, ModelConfig& cfg);

// config.json for `cfg` in the form transformers 5 writes (architectures, model_type, dtype, rope_parameters,
// and the Hub's rope_theta / rope_scaling / torch_dtype beside them, so older readers take it too).
std::string hf_config_json(const ModelConfig& cfg, const std::string& dtype);
// generation_config.json: bos/eos ids.
std::string hf_generation_config_json(const ModelConfig& cfg);

// Builds the llama of `cfg` with `vocab` tokens (cfg.vocab_size when > 0). ConfigError for bad shapes.
std::shared_ptr<Model> make_llama(const ModelConfig& cfg, std::int64_t vocab);

struct GenerateOptions {
  std::int64_t new_tokens = 64;
  double temperature = 0;             // 0: greedy (the first of equal maxima, as torch.argmax)
  std::int64_t top_k = 0;             // 0: all
  double top_p = 1.0;                 // nucleus: the smallest set whose probability reaches top_p (1: all)
  std::vector<std::int64_t> eos_ids;  // stop after drawing one of these
  bool kv_cache = true;               // false: the whole sequence again every token (the check of the cache)
};
// Autoregressive decoding of a llama (make_llama) from `prompt` (int64 [T0]): returns prompt and new
// tokens [T0 + n] on the CPU. With the KV cache, each new token runs one position through the layers.
// The draw is made on the CPU with `gen` (one seed, one text on every device). on_token gets each id.
// UsageError for a model that is not a llama or bad values.
torch::Tensor generate_llama(Model& model, torch::Tensor prompt, const GenerateOptions& o, torch::Generator gen,
                             const std::function<void(std::int64_t)>& on_token = {});

// Whether `m` is a llama (make_llama).
bool is_llama(const Model& m);

// RoPE's cos and sin for positions 0 … positions-1, fp32 [positions, head_dim] each (the two halves
// equal: transformers' rotate-half layout), as the model computes them: the ONNX graph's constants.
std::pair<torch::Tensor, torch::Tensor> llama_rope_table(const ModelConfig& cfg, std::int64_t positions);

}  // namespace trainbox::models
