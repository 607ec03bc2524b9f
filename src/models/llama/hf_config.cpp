// The llama family's Hugging Face config.json, read into model.* keys and written back (models/llama.h).
// The state-dict side of the adapter is the identity: the modules carry transformers' names, and
// transformers' rotate-half RoPE layout is the one the model computes, so no permutation is needed.
#include <trainbox/models/llama.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <trainbox/util/errors.h>

#include <trainbox/models/hf_json.h>

namespace trainbox::models {
namespace {

using hf::int_of;
using hf::read_json;
using hf::real_of;
using hf::value_or;
using nlohmann::json;

// A key the family does not implement: one line naming it, what is supported, the fix.
[[noreturn]] void unsupported(const std::string& file, const std::string& what, const std::string& supported) {
  hf::unsupported(file, what, supported, "llama");
}

// Attention as Mistral's (no biases, the sliding window) or Qwen3's (per-head q/k norms).
bool mistral_like(const std::string& arch) { return arch == "MistralForCausalLM" || arch == "MixtralForCausalLM"; }
bool qwen3_like(const std::string& arch) { return arch == "Qwen3ForCausalLM" || arch == "Qwen3MoeForCausalLM"; }
bool moe_architecture(const std::string& arch) { return arch == "MixtralForCausalLM" || arch == "Qwen3MoeForCausalLM"; }

std::string architecture_of(const json& j, const std::string& file) {
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  const std::string type = value_or<std::string>(j, "model_type", "");
  for (const auto& a : kLlamaArchitectures)
    if (arch == a.architecture || (arch.empty() && type == a.model_type)) return std::string(a.architecture);
  std::vector<std::string_view> names;
  for (const auto& a : kLlamaArchitectures) names.push_back(a.architecture);
  const std::string what =
      arch.empty() ? fmt::format("model_type \"{}\"", type) : fmt::format("architectures \"{}\"", arch);
  if (arch == "GPT2LMHeadModel" || type == "gpt2")
    throw ConfigError(fmt::format("{}: {} is a GPT-2 folder, not a llama", file, what),
                      "set model.name = \"gpt\" (with its n_layer, n_head, n_embd) to read GPT-2 weights");
  unsupported(file, what, fmt::format("model.name = \"llama\" reads {}", fmt::join(names, ", ")));
}

// RoPE: v5's rope_parameters block, or the Hub's top-level rope_theta and rope_scaling.
void read_rope(const json& j, const std::string& file, ModelConfig& c) {
  json p = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"] : json::object();
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
    for (auto& [k, v] : j["rope_scaling"].items()) p[k] = v;
  c.rope_theta = real_of(p, "rope_theta", real_of(j, "rope_theta", 10000.0, file), file);
  std::string type = value_or<std::string>(p, "rope_type", value_or<std::string>(p, "type", "default"));
  if (type == "default") {
    c.rope_scaling = "none";
  } else if (type == "linear" || type == "llama3") {
    c.rope_scaling = type;
    c.rope_factor = real_of(p, "factor", 1.0, file);
    if (type == "llama3") {
      c.rope_low_freq_factor = real_of(p, "low_freq_factor", 1.0, file);
      c.rope_high_freq_factor = real_of(p, "high_freq_factor", 4.0, file);
      c.rope_original_max_position = int_of(p, "original_max_position_embeddings", 8192, file);
    }
  } else {
    unsupported(file, fmt::format("rope_type \"{}\"", type), "RoPE types default, linear and llama3 are");
  }
  const double partial = real_of(j, "partial_rotary_factor", real_of(p, "partial_rotary_factor", 1.0, file), file);
  if (partial != 1.0) unsupported(file, fmt::format("partial_rotary_factor {}", partial), "RoPE on the whole head is");
}

// Keys that change the computation in ways the family does not implement.
void refuse_features(const json& j, const std::string& file, const std::string& arch) {
  if (j.contains("quantization_config") && !j["quantization_config"].is_null())
    unsupported(file, "quantization_config (a quantized checkpoint)", "bf16, fp16 and fp32 weights are");
  if (!moe_architecture(arch))
    for (const char* k : {"num_local_experts", "num_experts", "moe_intermediate_size", "n_routed_experts"})
      if (j.contains(k) && !j[k].is_null() && !(j[k].is_number_integer() && j[k].get<std::int64_t>() == 0))
        unsupported(file, fmt::format("\"{}\" in a {} (mixture of experts)", k, arch),
                    "experts in MixtralForCausalLM and Qwen3MoeForCausalLM are");
  if (arch == "MixtralForCausalLM" && real_of(j, "router_jitter_noise", 0.0, file) != 0.0)
    unsupported(file, fmt::format("router_jitter_noise {}", real_of(j, "router_jitter_noise", 0.0, file)),
                "routing without jitter is");
  if (arch == "Qwen3MoeForCausalLM") {
    if (int_of(j, "decoder_sparse_step", 1, file) != 1)
      unsupported(file, fmt::format("decoder_sparse_step {}", int_of(j, "decoder_sparse_step", 1, file)),
                  "experts in every layer (decoder_sparse_step 1) are");
    if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() && !j["mlp_only_layers"].empty())
      unsupported(file, "mlp_only_layers (dense layers among the MoE ones)", "experts in every layer are");
  }
  const std::string act = value_or<std::string>(j, "hidden_act", "silu");
  if (act != "silu") unsupported(file, fmt::format("hidden_act \"{}\"", act), "SwiGLU with silu is");
  if (value_or<bool>(j, "mlp_bias", false)) unsupported(file, "mlp_bias = true", "MLPs without biases are");
  const bool per_layer = value_or<bool>(j, "use_sliding_window", false);
  if (per_layer && !mistral_like(arch))
    unsupported(file, "use_sliding_window = true (sliding-window layers)",
                "full attention in every layer, or Mistral's sliding_window on all of them, is");
  if (j.contains("layer_types") && j["layer_types"].is_array())
    for (const auto& t : j["layer_types"])
      if (t.is_string() && t.get<std::string>() != "full_attention" && !mistral_like(arch))
        unsupported(file, fmt::format("layer_types \"{}\"", t.get<std::string>()), "full_attention layers are");
}

std::vector<std::int64_t> ids_of(const json& v) {
  std::vector<std::int64_t> out;
  if (v.is_number_integer()) out.push_back(v.get<std::int64_t>());
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) out.push_back(e.get<std::int64_t>());
  return out;
}

}  // namespace

std::vector<std::string> read_hf_config(const std::string& dir, ModelConfig& c) {
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  const json j = read_json(file);
  if (!j.is_object()) throw DataError(file + " is not a JSON object", "restore config.json from the model's source");
  const std::string arch = architecture_of(j, file);
  refuse_features(j, file, arch);
  c.name = "llama";
  c.hf_architecture = arch;
  c.vocab_size = int_of(j, "vocab_size", 0, file);
  c.n_embd = int_of(j, "hidden_size", 0, file);
  c.intermediate_size = int_of(j, "intermediate_size", 0, file);
  c.n_layer = int_of(j, "num_hidden_layers", 0, file);
  c.n_head = int_of(j, "num_attention_heads", 0, file);
  c.n_kv_head = int_of(j, "num_key_value_heads", c.n_head, file);
  c.head_dim = int_of(j, "head_dim", 0, file);
  if (c.n_head > 0 && c.head_dim == c.n_embd / c.n_head && c.n_embd % c.n_head == 0) c.head_dim = 0;  // the default
  c.norm_eps = real_of(j, "rms_norm_eps", 1e-6, file);
  c.tie_embeddings = value_or<bool>(j, "tie_word_embeddings", false);
  c.max_position = int_of(j, "max_position_embeddings", 0, file);
  const bool attention_bias = value_or<bool>(j, "attention_bias", false);
  c.qkv_bias = arch == "Qwen2ForCausalLM" || (!mistral_like(arch) && attention_bias);
  c.o_bias = (arch == "LlamaForCausalLM" || qwen3_like(arch)) && attention_bias;
  c.qk_norm = qwen3_like(arch);
  c.sliding_window = mistral_like(arch) ? int_of(j, "sliding_window", 0, file) : 0;
  c.moe_experts = 0;
  if (moe_architecture(arch)) {
    const bool mixtral = arch == "MixtralForCausalLM";
    // transformers 5 writes Qwen3-MoE's num_experts as num_local_experts; the Hub's files say num_experts
    c.moe_experts = int_of(j, "num_local_experts", int_of(j, "num_experts", 0, file), file);
    c.moe_top_k = int_of(j, "num_experts_per_tok", 2, file);
    c.moe_intermediate_size = mixtral ? 0 : int_of(j, "moe_intermediate_size", 0, file);
    c.moe_norm_topk = mixtral || value_or<bool>(j, "norm_topk_prob", false);
    c.moe_aux_loss_coef = real_of(j, "router_aux_loss_coef", 0.001, file);
    if (c.moe_experts < 1 || c.moe_top_k < 1 || c.moe_top_k > c.moe_experts)
      throw DataError(fmt::format("{}: {} routes each token to num_experts_per_tok = {} of {} experts", file, arch,
                                  c.moe_top_k, c.moe_experts),
                      "restore config.json from the model's source: num_experts_per_tok is between 1 and the experts");
  }
  read_rope(j, file, c);
  c.bos_token_id = int_of(j, "bos_token_id", -1, file);
  c.eos_token_ids = j.contains("eos_token_id") ? ids_of(j["eos_token_id"]) : std::vector<std::int64_t>{};
  const auto gen_file = std::filesystem::path(dir) / "generation_config.json";
  if (std::filesystem::exists(gen_file)) {
    const json g = read_json(gen_file.string());
    if (g.is_object() && g.contains("eos_token_id")) c.eos_token_ids = ids_of(g["eos_token_id"]);
    if (g.is_object()) c.bos_token_id = int_of(g, "bos_token_id", c.bos_token_id, gen_file.string());
  }
  if (c.block_size <= 0) c.block_size = c.max_position > 0 ? c.max_position : 2048;
  std::vector<std::string> notes;
  const std::string dtype = value_or<std::string>(j, "dtype", value_or<std::string>(j, "torch_dtype", ""));
  notes.push_back(fmt::format("{} ({} layers, {} heads / {} key-value heads, hidden {}){}", arch, c.n_layer, c.n_head,
                              c.n_kv_head, c.n_embd, dtype.empty() ? "" : ", stored as " + dtype));
  if (c.moe_experts > 0)
    notes.push_back(
        fmt::format("a mixture of {} experts in every layer, {} per token{}, load-balancing loss x {} "
                    "(model.moe.aux_loss = {})",
                    c.moe_experts, c.moe_top_k, c.moe_norm_topk ? " (weights renormalised)" : "", c.moe_aux_loss_coef,
                    c.moe_aux_loss ? "true" : "false"));
  if (c.sliding_window > 0 && c.sliding_window < c.block_size)
    notes.push_back(fmt::format("sliding window of {} positions, below model.block_size = {}: applied",
                                c.sliding_window, c.block_size));
  return notes;
}

namespace {
// The architecture a config is written back as: the one it was read from, else the one its features name.
std::string export_architecture(const ModelConfig& c) {
  if (!c.hf_architecture.empty()) return c.hf_architecture;
  if (c.moe_experts > 0) return c.qk_norm ? "Qwen3MoeForCausalLM" : "MixtralForCausalLM";
  if (c.qk_norm) return "Qwen3ForCausalLM";
  if (c.qkv_bias && !c.o_bias) return "Qwen2ForCausalLM";
  if (c.sliding_window > 0) return "MistralForCausalLM";
  return "LlamaForCausalLM";
}

// Whether the architecture expresses the config's features (an unexpressible one would load with other maths).
void check_expressible(const ModelConfig& c, const std::string& arch) {
  auto refuse = [&](const std::string& feature) {
    throw UsageError(fmt::format("{} cannot express {}: transformers would compute another model", arch, feature),
                     "train with the features of one architecture (docs/models.md, the llama family)");
  };
  const bool qwen2 = arch == "Qwen2ForCausalLM", qwen3 = qwen3_like(arch), mistral = mistral_like(arch);
  if (moe_architecture(arch) != (c.moe_experts > 0)) refuse(c.moe_experts > 0 ? "a mixture of experts" : "dense MLPs");
  if (arch == "MixtralForCausalLM" && !c.moe_norm_topk) refuse("routing weights that are not renormalised");
  if (qwen3 != c.qk_norm) refuse(c.qk_norm ? "per-head q/k norms" : "the absence of q/k norms");
  if (qwen2 && (!c.qkv_bias || c.o_bias)) refuse("q/k/v biases other than Qwen2's (q, k, v with, o without)");
  if (!qwen2 && !mistral && c.qkv_bias != c.o_bias) refuse("biases on q/k/v but not o (or o alone)");
  if (mistral && (c.qkv_bias || c.o_bias)) refuse("attention biases");
  if (!mistral && c.sliding_window > 0) refuse("a sliding window");
}
}  // namespace

std::string hf_config_json(const ModelConfig& c, const std::string& dtype) {
  const std::string arch = export_architecture(c);
  check_expressible(c, arch);
  std::string type = "llama";
  for (const auto& a : kLlamaArchitectures)
    if (a.architecture == arch) type = a.model_type;
  const std::int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.n_embd / c.n_head;
  json rope = {{"rope_theta", c.rope_theta}, {"rope_type", c.rope_scaling == "none" ? "default" : c.rope_scaling}};
  if (c.rope_scaling != "none") rope["factor"] = c.rope_factor;
  if (c.rope_scaling == "llama3") {
    rope["low_freq_factor"] = c.rope_low_freq_factor;
    rope["high_freq_factor"] = c.rope_high_freq_factor;
    rope["original_max_position_embeddings"] = c.rope_original_max_position;
  }
  json j = {{"architectures", {arch}},
            {"model_type", type},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.n_embd},
            {"intermediate_size", c.intermediate_size > 0 ? c.intermediate_size : (8 * c.n_embd / 3 + 63) / 64 * 64},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.n_kv_head > 0 ? c.n_kv_head : c.n_head},
            {"head_dim", head_dim},
            {"hidden_act", "silu"},
            {"max_position_embeddings", c.max_position > 0 ? c.max_position : c.block_size},
            {"rms_norm_eps", c.norm_eps},
            {"tie_word_embeddings", c.tie_embeddings},
            {"attention_bias", c.qkv_bias || c.o_bias},
            {"attention_dropout", 0.0},
            {"initializer_range", 0.02},
            {"use_cache", true},
            {"rope_parameters", rope},
            {"dtype", dtype}};
  if (c.moe_experts > 0) {
    j["num_experts_per_tok"] = c.moe_top_k;
    j["router_aux_loss_coef"] = c.moe_aux_loss_coef;
    j["output_router_logits"] = c.moe_aux_loss;
    if (type == "mixtral") {
      j["num_local_experts"] = c.moe_experts;
      j["router_jitter_noise"] = 0.0;
      j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    } else {
      j["num_experts"] = c.moe_experts;
      j["moe_intermediate_size"] = c.moe_intermediate_size > 0 ? json(c.moe_intermediate_size) : j["intermediate_size"];
      j["norm_topk_prob"] = c.moe_norm_topk;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = json::array();
      j["use_sliding_window"] = false;
    }
  }
  if (type == "mistral") j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty())
    j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  return j.dump(2) + "\n";
}

std::string hf_generation_config_json(const ModelConfig& c) {
  json j = json::object();
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty())
    j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  return j.dump(2) + "\n";
}

}  // namespace trainbox::models
