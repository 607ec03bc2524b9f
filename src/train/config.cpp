#include <trainbox/train/config.h>
#include <trainbox/train/config_rules.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include <trainbox/models/registry.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

#include <trainbox/data/formats.h>

namespace trainbox::train {
namespace {

// --- value formatting (for to_toml and docs) ---
std::string toml_value(std::int64_t v) { return std::to_string(v); }
std::string toml_value(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep floats floats
  return s;
}
std::string toml_value(bool v) { return v ? "true" : "false"; }
// A TOML basic string: quotes and backslashes escaped, and control characters too (TOML
// forbids them raw; a --set value may hold one), so config.toml always reads back.
std::string toml_value(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\u{:04X}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}
// train.amp's spellings (the config's enum-valued key): the one table both ways.
constexpr std::array<std::pair<const char*, Amp>, 4> kAmpNames = {
    {{"off", Amp::kOff}, {"bf16", Amp::kBf16}, {"fp16", Amp::kFp16}, {"auto", Amp::kAuto}}};
std::string toml_value(Amp a) { return toml_value(std::string(amp_name(a))); }
template <class T>
std::string toml_value(const std::vector<T>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_value(v[i]);
  return out + "]";
}

std::string describe(const toml::node& n) {
  if (n.is_string()) return toml_value(std::string(*n.as_string()));
  if (n.is_floating_point()) return toml_value(*n.value<double>());  // 0.9, not 0.90000000000000002
  if (const toml::array* a = n.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + describe(*a->get(i));
    return out + "]";
  }
  std::ostringstream ss;
  n.visit([&](auto&& v) { ss << v; });
  return ss.str();
}

// --- one key of the table ---
struct Field {
  FieldInfo info;
  std::function<void(Config&, const toml::node&)> set;  // throws ConfigError
  std::function<std::string(const Config&)> get;
};

// Where every key is described: the command works for a pip install, which has no docs/ folder.
constexpr std::string_view kKeyReference = "every key: trainbox train --config-reference, or docs/config.md";

[[noreturn]] void bad_value(const std::string& key, const toml::node& n, const std::string& allowed) {
  throw ConfigError(fmt::format("{} = {} is not allowed: {}", key, describe(n), allowed),
                    fmt::format("set {} to a value that is {} ({})", key, allowed, kKeyReference));
}

struct Range {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  std::string text() const {
    if (std::isinf(lo) && std::isinf(hi)) return "any number";
    if (std::isinf(hi)) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
    return fmt::format("{} {} and <= {}", lo_open ? ">" : ">=", lo, hi);
  }
  bool ok(double v) const { return (lo_open ? v > lo : v >= lo) && v <= hi; }
};

std::int64_t get_int(const std::string& key, const toml::node& n, const Range& r) {
  auto v = n.value<std::int64_t>();
  if (!n.is_integer() || !v) bad_value(key, n, "an integer " + r.text());
  if (!r.ok(static_cast<double>(*v))) bad_value(key, n, "an integer " + r.text());
  return *v;
}
double get_float(const std::string& key, const toml::node& n, const Range& r) {
  auto v = n.value<double>();  // integers are accepted as floats (lr = 1 is fine)
  if (!(n.is_floating_point() || n.is_integer()) || !v || std::isnan(*v)) bad_value(key, n, "a number " + r.text());
  if (!r.ok(*v)) bad_value(key, n, "a number " + r.text());
  return *v;
}

template <class S, class T>
Field make_field(std::string key, S Config::*sec, T S::*mem, std::string type, std::string allowed, std::string doc,
                 std::function<T(const std::string&, const toml::node&)> parse) {
  Field f;
  Config defaults;
  f.info = {key, std::move(type), toml_value(defaults.*sec.*mem), std::move(allowed), std::move(doc)};
  f.set = [key, sec, mem, parse](Config& c, const toml::node& n) { c.*sec.*mem = parse(key, n); };
  f.get = [sec, mem](const Config& c) { return toml_value(c.*sec.*mem); };
  return f;
}

template <class S>
Field int_field(std::string key, S Config::*sec, std::int64_t S::*mem, Range r, std::string doc) {
  return make_field<S, std::int64_t>(key, sec, mem, "int", r.text(), std::move(doc),
                                     [r](const std::string& k, const toml::node& n) { return get_int(k, n, r); });
}
template <class S>
Field float_field(std::string key, S Config::*sec, double S::*mem, Range r, std::string doc) {
  return make_field<S, double>(key, sec, mem, "float", r.text(), std::move(doc),
                               [r](const std::string& k, const toml::node& n) { return get_float(k, n, r); });
}
template <class S>
Field bool_field(std::string key, S Config::*sec, bool S::*mem, std::string doc) {
  return make_field<S, bool>(key, sec, mem, "bool", "true or false", std::move(doc),
                             [](const std::string& k, const toml::node& n) {
                               if (!n.is_boolean()) bad_value(k, n, "true or false");
                               return *n.value<bool>();
                             });
}
std::string one_of(const std::vector<std::string>& choices) {
  return choices.empty() ? "a string" : "one of: " + fmt::format("{}", fmt::join(choices, ", "));
}
template <class S>
Field string_field(std::string key, S Config::*sec, std::string S::*mem, std::vector<std::string> choices,
                   std::string doc) {
  std::string allowed = one_of(choices);
  return make_field<S, std::string>(
      key, sec, mem, "string", allowed, std::move(doc), [choices, allowed](const std::string& k, const toml::node& n) {
        if (!n.is_string()) bad_value(k, n, allowed);
        std::string v = *n.value<std::string>();
        if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end()) bad_value(k, n, allowed);
        return v;
      });
}
// A key spelled as one of a few strings in TOML and held as an enum: parsed here, once, and
// compared as an enum everywhere else. Its type, "allowed" text and errors are string_field's.
template <class S, class E, std::size_t N>
Field enum_field(std::string key, S Config::*sec, E S::*mem, const std::array<std::pair<const char*, E>, N>& names,
                 std::string doc) {
  std::vector<std::string> spellings;
  for (const auto& [spelling, value] : names) spellings.emplace_back(spelling);
  std::string allowed = one_of(spellings);
  return make_field<S, E>(key, sec, mem, "string", allowed, std::move(doc),
                          [names, allowed](const std::string& k, const toml::node& n) {
                            if (n.is_string()) {
                              const std::string v = *n.value<std::string>();
                              for (const auto& [spelling, value] : names)
                                if (v == spelling) return value;
                            }
                            bad_value(k, n, allowed);
                          });
}
template <class S, class T>
Field list_field(std::string key, S Config::*sec, std::vector<T> S::*mem, Range r, std::size_t min_len,
                 std::size_t max_len, std::string doc) {
  constexpr bool is_int = std::is_same_v<T, std::int64_t>;
  std::string allowed =
      fmt::format("a list of {} {} each {}",
                  min_len == max_len ? std::to_string(min_len) : fmt::format("{} to {}", min_len, max_len),
                  is_int ? "integers" : "numbers", r.text());
  return make_field<S, std::vector<T>>(
      key, sec, mem, is_int ? "int list" : "float list", allowed, std::move(doc),
      [r, min_len, max_len, allowed](const std::string& k, const toml::node& n) {
        const toml::array* a = n.as_array();
        if (!a || a->size() < min_len || a->size() > max_len) bad_value(k, n, allowed);
        std::vector<T> out;
        for (const auto& e : *a) {
          if constexpr (is_int) {
            if (!e.is_integer() || !r.ok(static_cast<double>(*e.value<std::int64_t>()))) bad_value(k, n, allowed);
            out.push_back(*e.value<std::int64_t>());
          } else {
            if (!(e.is_integer() || e.is_floating_point()) || !r.ok(*e.value<double>())) bad_value(k, n, allowed);
            out.push_back(*e.value<double>());
          }
        }
        return out;
      });
}

// A list of names (model.lora.target_modules): each a non-empty string.
template <class S>
Field names_field(std::string key, S Config::*sec, std::vector<std::string> S::*mem, std::size_t min_len,
                  std::size_t max_len, std::string doc) {
  std::string allowed = fmt::format("a list of {} to {} non-empty strings", min_len, max_len);
  return make_field<S, std::vector<std::string>>(
      key, sec, mem, "string list", allowed, std::move(doc),
      [min_len, max_len, allowed](const std::string& k, const toml::node& n) {
        const toml::array* a = n.as_array();
        if (!a || a->size() < min_len || a->size() > max_len) bad_value(k, n, allowed);
        std::vector<std::string> out;
        for (const auto& e : *a) {
          if (!e.is_string() || e.value<std::string>()->empty()) bad_value(k, n, allowed);
          out.push_back(*e.value<std::string>());
        }
        return out;
      });
}

// The ranges the key tables share.
using C = Config;
constexpr Range pos{0, std::numeric_limits<double>::infinity(), true};  // > 0
constexpr Range nonneg{0};
constexpr Range positive_int{1};

// The key table, a section per function (each key: type, range or choices, meaning); fields()
// joins them in this order, which is config.toml's and docs/config.md's.
const std::vector<Field>& model_data_fields() {
  // The key tables are laid out one key a line (clang-format off): they read as the reference they generate.
  // clang-format off
  static const std::vector<Field> kFields = {
      // --- model ---
      string_field("model.name", &C::model, &ModelConfig::name, models::model_names(), "Model, by registered name."),
      list_field("model.hidden", &C::model, &ModelConfig::hidden, positive_int, 0, 16, "mlp: hidden layer sizes (the default is the classic Net: 784-128-10)."),
      list_field("model.channels", &C::model, &ModelConfig::channels, positive_int, 1, 8, "cnn: output channels of each 3x3 conv layer (each followed by ReLU and 2x2 max-pool)."),
      int_field("model.fc", &C::model, &ModelConfig::fc, positive_int, "cnn: width of the hidden fully-connected layer."),
      int_field("model.width", &C::model, &ModelConfig::width, positive_int, "resnet: channels of the first stage (doubled per stage)."),
      list_field("model.blocks", &C::model, &ModelConfig::blocks, positive_int, 1, 8, "resnet: basic blocks per stage ([2,2,2,2] = ResNet-18)."),
      bool_field("model.sync_batchnorm", &C::model, &ModelConfig::sync_batchnorm, "resnet, resnet18/34/50: BatchNorm normalises with the statistics of the whole global batch, summed over the ranks (torch.nn.SyncBatchNorm); 2 ranks with batch b then train exactly as 1 process with 2b."),
      int_field("model.n_layer", &C::model, &ModelConfig::n_layer, Range{1, 256}, "gpt/llama/bert: transformer blocks."),
      int_field("model.n_head", &C::model, &ModelConfig::n_head, Range{1, 256}, "gpt/llama/bert: attention heads (must divide n_embd)."),
      int_field("model.n_embd", &C::model, &ModelConfig::n_embd, Range{1, 65536}, "gpt/llama/bert: embedding width."),
      int_field("model.block_size", &C::model, &ModelConfig::block_size, Range{1, 1 << 20}, "gpt/llama/bert: context length in tokens."),
      float_field("model.dropout", &C::model, &ModelConfig::dropout, Range{0, 0.99}, "gpt/bert: dropout probability."),
      bool_field("model.bias", &C::model, &ModelConfig::bias, "gpt: biases in the Linear and LayerNorm layers (GPT-2: true)."),
      int_field("model.vocab_size", &C::model, &ModelConfig::vocab_size, Range{0, 1 << 24}, "gpt/llama/bert: vocabulary size (0 = the dataset's: 256 for byte-level text; the largest token id + 1 for .bin)."),
      string_field("model.activation_checkpointing", &C::model, &ModelConfig::activation_checkpointing, {"none", "blocks", "every_k"}, "gpt/llama/bert/resnet/resnet18/resnet34/resnet50: activation checkpointing: a checkpointed block keeps only its input and recomputes its forward in the backward (less memory, about one more forward of it). none; blocks = every transformer block (gpt) or decoder layer (llama) or residual block (resnets); every_k = blocks K, 2K, ... with K = model.activation_checkpointing_every. The gradients are those of none (docs/models.md)."),
      int_field("model.activation_checkpointing_every", &C::model, &ModelConfig::activation_checkpointing_every, Range{1, 1024}, "gpt/llama/bert/resnet/resnet18/resnet34/resnet50: every_k's K (1 = blocks)."),
      int_field("model.n_kv_head", &C::model, &ModelConfig::n_kv_head, Range{0, 256}, "llama: key/value heads, shared by n_head / n_kv_head query heads each (grouped-query attention; 0 = n_head)."),
      int_field("model.head_dim", &C::model, &ModelConfig::head_dim, Range{0, 1024}, "llama: width of one attention head (0 = n_embd / n_head; Qwen3 sets it)."),
      int_field("model.intermediate_size", &C::model, &ModelConfig::intermediate_size, Range{0, 1 << 20}, "llama/bert: the MLP width (llama: SwiGLU, 0 = 8 n_embd / 3 rounded up to a multiple of 64; bert: 0 = 4 n_embd)."),
      float_field("model.rope_theta", &C::model, &ModelConfig::rope_theta, pos, "llama: RoPE base (Llama 2: 10000, Llama 3: 500000)."),
      string_field("model.rope_scaling", &C::model, &ModelConfig::rope_scaling, {"none", "linear", "llama3"}, "llama: RoPE frequency scaling, as transformers' rope_type: none (default), linear (positions / rope_factor), llama3 (Llama 3.1+)."),
      float_field("model.rope_factor", &C::model, &ModelConfig::rope_factor, pos, "llama: rope_scaling's factor (linear, llama3)."),
      float_field("model.rope_low_freq_factor", &C::model, &ModelConfig::rope_low_freq_factor, pos, "llama: llama3 scaling's low_freq_factor."),
      float_field("model.rope_high_freq_factor", &C::model, &ModelConfig::rope_high_freq_factor, pos, "llama: llama3 scaling's high_freq_factor."),
      int_field("model.rope_original_max_position", &C::model, &ModelConfig::rope_original_max_position, positive_int, "llama: llama3 scaling's original_max_position_embeddings."),
      int_field("model.max_position", &C::model, &ModelConfig::max_position, Range{0, 1 << 24}, "llama/bert: max_position_embeddings (bert: the position embeddings; llama: written back on export; 0 = block_size)."),
      float_field("model.norm_eps", &C::model, &ModelConfig::norm_eps, pos, "llama/bert: the norms' epsilon (llama: RMSNorm's rms_norm_eps; bert: LayerNorm's layer_norm_eps, 1e-12 in BERT's configs)."),
      bool_field("model.tie_embeddings", &C::model, &ModelConfig::tie_embeddings, "llama: lm_head shares embed_tokens' weight (tie_word_embeddings)."),
      bool_field("model.qkv_bias", &C::model, &ModelConfig::qkv_bias, "llama: biases on q_proj, k_proj and v_proj (Qwen2; Llama's attention_bias)."),
      bool_field("model.o_bias", &C::model, &ModelConfig::o_bias, "llama: a bias on o_proj (Llama's attention_bias)."),
      bool_field("model.qk_norm", &C::model, &ModelConfig::qk_norm, "llama: RMSNorm of each head's q and k before RoPE (Qwen3)."),
      int_field("model.sliding_window", &C::model, &ModelConfig::sliding_window, Range{0, 1 << 24}, "llama: each position attends to the last N positions only (Mistral; 0 = all)."),
      string_field("model.hf_architecture", &C::model, &ModelConfig::hf_architecture, {}, "llama/bert: the Hugging Face class the folder was read as (llama: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM, written back by export; empty = the one the features name; bert: informational, export writes the task's class)."),
      list_field("model.eos_token_ids", &C::model, &ModelConfig::eos_token_ids, nonneg, 0, 16, "llama: token ids that end generation (trainbox sample; generation_config.json's eos_token_id)."),
      int_field("model.bos_token_id", &C::model, &ModelConfig::bos_token_id, Range{-1, 1 << 24}, "llama: the beginning-of-sequence id written to generation_config.json (-1 = none)."),
      string_field("model.task", &C::model, &ModelConfig::task, {"classification", "mlm", "encoder"}, "bert: the head: classification (the [CLS] pooler and a classifier: BertForSequenceClassification; trains on text_classes), mlm (the masked-LM head: BertForMaskedLM; logits and export only), encoder (none: BertModel's last hidden state; logits and export only)."),
      int_field("model.num_labels", &C::model, &ModelConfig::num_labels, Range{0, 1 << 20}, "bert: classification's classes (0 = the dataset's)."),
      int_field("model.type_vocab_size", &C::model, &ModelConfig::type_vocab_size, positive_int, "bert: token-type (segment) embeddings; every token is type 0."),
      int_field("model.pad_token_id", &C::model, &ModelConfig::pad_token_id, nonneg, "bert: the padding id, masked out of attention (text_classes pads with 0)."),
      string_field("model.init_from", &C::model, &ModelConfig::init_from, {}, "Initial weights: a safetensors file with PyTorch state_dict names, or a save_pretrained folder (model.safetensors, or shards with model.safetensors.index.json); strict; Hugging Face GPT-2 layout accepted; with model.name = llama the folder's config.json sets the architecture."),
      int_field("model.lora.r", &C::model, &ModelConfig::lora_r, Range{0, 4096}, "llama: LoRA's rank (PEFT's r): low-rank adapters on the Linear layers of model.lora.target_modules, every other weight frozen (no gradient, optimizer state or all-reduce); 0 = no adapters, a full fine-tune (docs/lora.md)."),
      float_field("model.lora.alpha", &C::model, &ModelConfig::lora_alpha, pos, "llama: LoRA's alpha: the adapters' output is scaled by alpha / r (alpha / sqrt(r) with model.lora.rslora)."),
      float_field("model.lora.dropout", &C::model, &ModelConfig::lora_dropout, Range{0, 1, false}, "llama: dropout on the adapters' input (PEFT's lora_dropout)."),
      names_field("model.lora.target_modules", &C::model, &ModelConfig::lora_target_modules, 1, 16, "llama: the Linear layers that get adapters, by the last part of their Hugging Face name: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head."),
      bool_field("model.lora.rslora", &C::model, &ModelConfig::lora_rslora, "llama: rank-stabilised LoRA: scale alpha / sqrt(r) instead of alpha / r (PEFT's use_rslora)."),
      string_field("model.lora.init_from", &C::model, &ModelConfig::lora_init_from, {}, "llama: continue from a PEFT adapter folder (adapter_config.json + adapter_model.safetensors): its r, alpha, target_modules and rslora set the model.lora keys, its tensors the adapters (shapes checked against the base)."),
      string_field("model.base_dtype", &C::model, &ModelConfig::base_dtype, {"fp32", "bf16", "fp16"}, "llama: with model.lora.r > 0, the dtype the frozen weights are kept in (bf16 halves their memory); the adapters train in fp32, their output added in the base's dtype, as PEFT does."),
      int_field("model.moe.experts", &C::model, &ModelConfig::moe_experts, Range{0, 1 << 16}, "llama: a mixture of experts in every layer's MLP (Mixtral, Qwen3-MoE): this many SwiGLU experts and a router; 0 = a dense MLP. A Hugging Face folder's num_local_experts / num_experts sets it (docs/moe.md)."),
      int_field("model.moe.top_k", &C::model, &ModelConfig::moe_top_k, Range{1, 1 << 16}, "llama: the experts each token is routed to (num_experts_per_tok); every routed token is computed (dropless)."),
      int_field("model.moe.intermediate_size", &C::model, &ModelConfig::moe_intermediate_size, Range{0, 1 << 24}, "llama: each expert's SwiGLU width (Qwen3-MoE's moe_intermediate_size); 0 = model.intermediate_size (Mixtral's)."),
      bool_field("model.moe.norm_topk", &C::model, &ModelConfig::moe_norm_topk, "llama: renormalise the top-k routing weights to sum to 1 (Mixtral always; Qwen3-MoE's norm_topk_prob)."),
      bool_field("model.moe.aux_loss", &C::model, &ModelConfig::moe_aux_loss, "llama: add the router's load-balancing loss (Switch Transformer's, as transformers computes it with output_router_logits) to the training loss; not read from a folder."),
      float_field("model.moe.aux_loss_coef", &C::model, &ModelConfig::moe_aux_loss_coef, Range{0, 1000}, "llama: the load-balancing loss's coefficient (router_aux_loss_coef)."),
      float_field("model.moe.collapse_share", &C::model, &ModelConfig::moe_collapse_share, Range{0, 1, true}, "llama: a warning line when one expert receives more than this share of a layer's tokens over a log window (a collapsing router)."),
      // --- data ---
      string_field("data.dataset", &C::data, &DataConfig::dataset, {"idx", "cifar10", "synthetic", "text", "text_classes", "imagefolder", "webdataset"}, "Dataset format: idx (MNIST / Fashion-MNIST, .gz or raw), cifar10 (binary batches), synthetic, text (a UTF-8 file as bytes, or a .bin of uint16 token ids), text_classes (labelled text for classification: JSON Lines of {text or ids, label}), imagefolder (ROOT/<class>/<image>, JPEG/PNG), webdataset (tar shards of <key>.jpg + <key>.cls)."),
      string_field("data.path", &C::data, &DataConfig::path, {}, "Directory with the dataset files (text: the file; imagefolder: the root of class folders; webdataset: the shards, brace ranges allowed)."),
      bool_field("data.normalize", &C::data, &DataConfig::normalize, "Normalise inputs with the training set's mean and std."),
      float_field("data.val_fraction", &C::data, &DataConfig::val_fraction, Range{0, 0.9}, "Fraction of the training set held out for validation (0 = none)."),
      int_field("data.limit", &C::data, &DataConfig::limit, nonneg, "Use only the first N training samples (0 = all)."),
      bool_field("data.device_resident", &C::data, &DataConfig::device_resident, "CUDA: copy the whole dataset to the GPU once and build batches there."),
      int_field("data.prefetch", &C::data, &DataConfig::prefetch, Range{0, 64}, "Batches prepared ahead by a background thread (0 = inline); the thread runs only on CUDA or when a core is left over."),
      int_field("data.synthetic_samples", &C::data, &DataConfig::synthetic_samples, positive_int, "synthetic: number of training samples (the test set is a sixth of it)."),
      list_field("data.synthetic_shape", &C::data, &DataConfig::synthetic_shape, positive_int, 3, 3, "synthetic: sample shape [channels, height, width]."),
      int_field("data.synthetic_classes", &C::data, &DataConfig::synthetic_classes, Range{2, 1e6}, "synthetic: number of classes."),
      float_field("data.text_holdout", &C::data, &DataConfig::text_holdout, Range{0, 0.5, true}, "text/text_classes: the last fraction of the token stream (text_classes: of the examples, unless data.val_path is set), held out as the val split."),
      bool_field("data.packing", &C::data, &DataConfig::packing, "text: the documents that share a window are kept apart: positions restart at each document start, a token attends only to its own document, and a target that begins a document is not trained (docs/text-data.md, \"Packing\"). Needs document starts (token shards of trainbox data tokenize) and a model that takes positions (llama)."),
      int_field("data.shuffle_buffer", &C::data, &DataConfig::shuffle_buffer, Range{0, 1 << 24}, "webdataset: 0 = each epoch is one permutation of every sample (random reads); N > 0 = WebDataset's order: the shards in a seeded order, their samples in stored order through a shuffle buffer of N (reads stay within about N samples of the stream). Both are a function of (seed, epoch): ranks, threads and resume are unaffected."),
      string_field("data.val_path", &C::data, &DataConfig::val_path, {}, "imagefolder/webdataset/text_classes: the evaluation images (a second tree or shard pattern; empty = data.val_fraction of data.path), or labelled text (a second .jsonl; empty = data.text_holdout of data.path)."),
      int_field("data.image_size", &C::data, &DataConfig::image_size, Range{8, 4096}, "imagefolder/webdataset: the square crop fed to the model, in pixels."),
      int_field("data.resize_size", &C::data, &DataConfig::resize_size, Range{0, 8192}, "imagefolder/webdataset: evaluation resizes the shorter side to this, then centre-crops image_size (0 = image_size / 0.875: 256 for 224)."),
      list_field("data.crop_scale", &C::data, &DataConfig::crop_scale, Range{0, 1, true}, 2, 2, "imagefolder/webdataset: RandomResizedCrop's range of the area fraction [min, max]."),
      list_field("data.crop_ratio", &C::data, &DataConfig::crop_ratio, pos, 2, 2, "imagefolder/webdataset: RandomResizedCrop's range of the aspect ratio [min, max]."),
      bool_field("data.hflip", &C::data, &DataConfig::hflip, "imagefolder/webdataset: flip training crops left-right with probability 0.5."),
      list_field("data.mean", &C::data, &DataConfig::norm_mean, Range{0, 1}, 3, 3, "imagefolder/webdataset: per-channel mean subtracted from pixel/255 (ImageNet's)."),
      list_field("data.std", &C::data, &DataConfig::norm_std, Range{0, 10, true}, 3, 3, "imagefolder/webdataset: per-channel std that pixel/255 - mean is divided by (ImageNet's)."),
      int_field("data.workers", &C::data, &DataConfig::workers, Range{0, 256}, "imagefolder/webdataset: decode threads (0 = this rank's share of the cores)."),
      string_field("data.on_bad_image", &C::data, &DataConfig::on_bad_image, {"error", "skip"}, "imagefolder/webdataset: a file that does not decode stops the run (error, exit 2) or is skipped, counted and named in the summary (skip)."),
      bool_field("data.channels_last", &C::data, &DataConfig::channels_last, "imagefolder/webdataset: batches in channels_last memory format (faster convolutions on tensor cores)."),
  };
  // clang-format on
  return kFields;
}

std::vector<Field> train_fields() {  // train, optim, schedule
  // clang-format off
  return {
      // --- train ---
      int_field("train.epochs", &C::train, &TrainSection::epochs, positive_int, "Passes over the training set."),
      int_field("train.batch_size", &C::train, &TrainSection::batch_size, positive_int, "Samples per micro-batch."),
      int_field("train.eval_batch_size", &C::train, &TrainSection::eval_batch_size, positive_int, "Samples per evaluation batch."),
      int_field("train.accumulate", &C::train, &TrainSection::accumulate, Range{1, 1024}, "Micro-batches per optimizer step (gradient accumulation)."),
      int_field("train.global_batch_size", &C::train, &TrainSection::global_batch_size, nonneg, "Samples per optimizer step over all ranks, kept at every world size (elastic jobs: each rank's micro-batch is global / (world x accumulate)); 0 = train.batch_size per rank (an elastic job keeps its first start's world x batch_size: docs/distributed.md)."),
      bool_field("train.allow_global_batch_change", &C::train, &TrainSection::allow_global_batch_change, "Resume a checkpoint trained with another global batch (refused otherwise; a few samples of that epoch may repeat)."),
      float_field("train.clip_grad_norm", &C::train, &TrainSection::clip_grad_norm, nonneg, "Clip the global gradient norm to this value (0 = off)."),
      int_field("train.max_steps", &C::train, &TrainSection::max_steps, nonneg, "Stop after N optimizer steps (0 = no limit)."),
      enum_field("train.amp", &C::train, &TrainSection::amp, kAmpNames, "Mixed precision: autocast to bf16 (CUDA or CPU) or fp16 with a dynamic loss scale (CUDA); auto = bf16 on CUDA and on a CPU with native bf16 (avx512_bf16 or amx_bf16), off on other CPUs, where bf16 is emulated (a step 15x slower)."),
      int_field("train.seed", &C::train, &TrainSection::seed, nonneg, "Seed for initialisation, data order and dropout."),
      bool_field("train.deterministic", &C::train, &TrainSection::deterministic, "Deterministic algorithms only (cudnn.benchmark off): bit-identical reruns, sometimes slower."),
      bool_field("train.cudnn_benchmark", &C::train, &TrainSection::cudnn_benchmark, "Let cuDNN time algorithms and pick the fastest (not deterministic)."),
      bool_field("train.cuda_graphs", &C::train, &TrainSection::cuda_graphs, "CUDA: capture the whole training step once and replay it (static shapes)."),
      int_field("train.threads", &C::train, &TrainSection::threads, nonneg, "Intra-op CPU threads (0 = torch's default, which follows OMP_NUM_THREADS; N > 0 wins over OMP_NUM_THREADS, with a note when they differ)."),
      string_field("train.device", &C::train, &TrainSection::device, {}, "auto (one GPU per local rank; CPU when ranks outnumber GPUs), cpu, cuda or cuda:N."),
      int_field("train.log_every", &C::train, &TrainSection::log_every, positive_int, "Log loss, lr and throughput every N optimizer steps."),
      // --- optim ---
      string_field("optim.name", &C::optim, &OptimConfig::name, {"sgd", "adam", "adamw"}, "Optimizer."),
      float_field("optim.lr", &C::optim, &OptimConfig::lr, Range{0, 10, true}, "Learning rate (peak, after warm-up)."),
      float_field("optim.momentum", &C::optim, &OptimConfig::momentum, Range{0, 0.999999}, "sgd: momentum."),
      bool_field("optim.nesterov", &C::optim, &OptimConfig::nesterov, "sgd: Nesterov momentum (needs momentum > 0)."),
      float_field("optim.weight_decay", &C::optim, &OptimConfig::weight_decay, Range{0, 1}, "L2 penalty (sgd, adam) or decoupled weight decay (adamw)."),
      list_field("optim.betas", &C::optim, &OptimConfig::betas, Range{0, 0.999999}, 2, 2, "adam/adamw: (beta1, beta2)."),
      float_field("optim.eps", &C::optim, &OptimConfig::eps, pos, "adam/adamw: epsilon."),
      // --- schedule ---
      string_field("schedule.name", &C::schedule, &ScheduleConfig::name, {"constant", "step", "cosine"}, "Learning-rate schedule after warm-up."),
      int_field("schedule.warmup_steps", &C::schedule, &ScheduleConfig::warmup_steps, nonneg, "Linear warm-up from 0 to optim.lr over N optimizer steps."),
      int_field("schedule.step_epochs", &C::schedule, &ScheduleConfig::step_epochs, positive_int, "step: multiply the rate by gamma every N epochs."),
      float_field("schedule.gamma", &C::schedule, &ScheduleConfig::gamma, Range{0, 1, true}, "step: decay factor."),
      float_field("schedule.min_lr", &C::schedule, &ScheduleConfig::min_lr, nonneg, "cosine: the rate at the last step."),
  };
  // clang-format on
}

std::vector<Field> run_fields() {  // checkpoint, output, dist, debug
  // clang-format off
  return {
      // --- checkpoint ---
      int_field("checkpoint.every_steps", &C::checkpoint, &CheckpointConfig::every_steps, nonneg, "Checkpoint every N optimizer steps (0 = off)."),
      int_field("checkpoint.every_epochs", &C::checkpoint, &CheckpointConfig::every_epochs, nonneg, "Checkpoint every N epochs (0 = off). A final checkpoint is always written."),
      int_field("checkpoint.keep", &C::checkpoint, &CheckpointConfig::keep, Range{1, 1e6}, "Keep the last N checkpoints; with 2 or more, a damaged newest one still leaves one to resume from (docs/checkpoints.md)."),
      bool_field("checkpoint.export_safetensors", &C::checkpoint, &CheckpointConfig::export_safetensors, "At the end, also export the weights to <run_dir>/model.safetensors."),
      // --- output ---
      bool_field("output.tensorboard", &C::output, &OutputConfig::tensorboard, "Write TensorBoard event files in the run dir."),
      string_field("output.progress", &C::output, &OutputConfig::progress, {"auto", "bar", "lines", "off"}, "Progress: a bar on a terminal and lines otherwise (auto), or forced."),
      // --- dist ---
      string_field("dist.backend", &C::dist, &DistConfig::backend, {"auto", "gloo", "nccl"}, "Data-parallel backend when WORLD_SIZE > 1: NCCL on CUDA, Gloo on CPU (auto)."),
      int_field("dist.timeout_s", &C::dist, &DistConfig::timeout_s, positive_int, "Seconds to wait for the other ranks at start-up and in every collective."),
      float_field("dist.bucket_cap_mb", &C::dist, &DistConfig::bucket_cap_mb, pos, "DDP gradient bucket size (MiB)."),
      float_field("dist.first_bucket_mb", &C::dist, &DistConfig::first_bucket_mb, pos, "Size of the first (earliest-ready) bucket (MiB): small, so communication starts early."),
      bool_field("dist.find_unused_parameters", &C::dist, &DistConfig::find_unused_parameters, "Allow parameters that get no gradient in some iterations (costs a graph walk per step)."),
      bool_field("dist.broadcast_buffers", &C::dist, &DistConfig::broadcast_buffers, "Re-send rank 0's buffers (BatchNorm statistics) before every forward."),
      int_field("dist.zero_stage", &C::dist, &DistConfig::zero_stage, Range{0, 3}, "ZeRO sharding (docs/distributed.md, \"Sharding (ZeRO)\"): 0 plain DDP; 1 the optimizer state sharded over the ranks; 2 the gradients too; 3 the parameters too, gathered unit by unit (a GPT block, a ResNet stage)."),
      string_field("dist.grad_compression", &C::dist, &DistConfig::grad_compression, {"none", "fp16", "bf16", "powersgd"}, "Gradient compression of DDP's buckets (docs/distributed.md, \"Gradient compression\"): fp16/bf16 halve the bytes; powersgd sends rank-r factors (PyTorch's hooks). For slow links."),
      int_field("dist.powersgd.rank", &C::dist, &DistConfig::powersgd_rank, Range{1}, "powersgd: the rank of each matrix's approximation (1, 2, 4 … ; larger is more accurate and sends more)."),
      int_field("dist.powersgd.start_step", &C::dist, &DistConfig::powersgd_start_step, Range{2}, "powersgd: synchronised steps of plain all-reduce before compression starts (PyTorch's start_powerSGD_iter; about 10 % of the steps is advised)."),
      float_field("dist.powersgd.min_compression_rate", &C::dist, &DistConfig::powersgd_min_compression_rate, pos, "powersgd: a matrix is compressed only if (rows + cols) x rank x this < rows x cols; others are sent whole."),
      bool_field("dist.powersgd.error_feedback", &C::dist, &DistConfig::powersgd_error_feedback, "powersgd: add what compression lost to the next step's gradient (one gradient's worth of memory)."),
      bool_field("dist.powersgd.warm_start", &C::dist, &DistConfig::powersgd_warm_start, "powersgd: start each step's power iteration from the last step's Q."),
      // --- debug ---
      int_field("debug.stall_rank", &C::debug, &DebugConfig::stall_rank, Range{-1}, "Fault injection: this rank sleeps forever at debug.stall_step / stall_phase (-1 = off)."),
      int_field("debug.stall_step", &C::debug, &DebugConfig::stall_step, nonneg, "Fault injection: the optimizer step (steps done) at which the rank stalls."),
      string_field("debug.stall_phase", &C::debug, &DebugConfig::stall_phase, {"data", "forward_backward", "optimizer", "checkpoint", "eval", "gpu_collective"}, "Fault injection: the phase in which the rank stalls (gpu_collective: its GPU stream hangs before the loss allreduce at a log point, so NCCL's watchdog times the collective out)."),
      int_field("debug.stall_attempt", &C::debug, &DebugConfig::stall_attempt, Range{-1}, "Fault injection: only on this launcher attempt (TORCHELASTIC_RESTART_COUNT; -1 = every attempt)."),
      bool_field("debug.sample_log", &C::debug, &DebugConfig::sample_log, "Write each micro-batch's sample indices to <run_dir>/samples/attempt_<A>_rank_<R>.jsonl."),
  };
  // clang-format on
}

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = [] {
    std::vector<Field> all = model_data_fields();
    for (auto section : {train_fields(), run_fields()})
      all.insert(all.end(), std::make_move_iterator(section.begin()), std::make_move_iterator(section.end()));
    return all;
  }();
  return kFields;
}

const Field* find_field(const std::string& key) {
  for (const auto& f : fields())
    if (f.info.key == key) return &f;
  return nullptr;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& origin) {
  std::vector<std::string> keys;
  for (const auto& f : fields()) keys.push_back(f.info.key);
  std::string near = closest_match(key, keys);
  throw ConfigError(fmt::format("unknown config key '{}' in {}", key, origin),
                    near.empty()
                        ? std::string("trainbox train --config-reference lists every key (as does docs/config.md)")
                        : fmt::format("did you mean '{}'? ({})", near, kKeyReference));
}

void apply_table(Config& c, const toml::table& t, const std::string& prefix, const std::string& origin) {
  for (const auto& [k, node] : t) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = node.as_table()) {
      apply_table(c, *sub, key, origin);
      continue;
    }
    const Field* f = find_field(key);
    if (!f) unknown_key(key, origin);
    try {
      f->set(c, node);
    } catch (ConfigError& e) {
      const auto& src = node.source();
      if (src.begin.line)
        throw ConfigError(fmt::format("{}:{}:{}: {}", origin, src.begin.line, src.begin.column, e.what()), e.hint());
      throw;
    }
  }
}

}  // namespace

const char* amp_name(Amp a) {
  for (const auto& [spelling, value] : kAmpNames)
    if (value == a) return spelling;
  return "?";
}

std::vector<FieldInfo> config_fields() {
  std::vector<FieldInfo> out;
  for (const auto& f : fields()) out.push_back(f.info);
  return out;
}

Config parse_config(const std::string& text, const std::string& origin) {
  toml::table t;
  try {
    t = toml::parse(text, origin);  // toml++ with upstream fix #305: cmake/tomlplusplus.cmake
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}:{}: not valid TOML: {}", origin, e.source().begin.line,
                                  e.source().begin.column, e.description()),
                      "fix the syntax at that line (https://toml.io)");
  }
  Config c;
  apply_table(c, t, "", origin);
  return c;
}

Config load_config(const std::string& path) {
  auto text = read_file(path);
  if (!text) throw ConfigError("cannot read config file " + path, "check the path (configs/ has ready ones)");
  return parse_config(*text, path);
}

void apply_override(Config& c, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set " + assignment + " is not key=value", "e.g. --set optim.lr=3e-4");
  std::string key = trim(assignment.substr(0, eq)), value = trim(assignment.substr(eq + 1));
  const Field* f = find_field(key);
  if (!f) unknown_key(key, "--set");
  toml::table t;
  try {
    t = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    // A bare word: take it as a string (paths, names). TOML strings are UTF-8, so one that
    // is not could not be written to the run dir's config.toml and read back on resume.
    if (auto bad = data::find_non_text(value); bad.offset >= 0)
      throw ConfigError(data::not_text_message("--set " + key + ": the value", value, bad),
                        "config values are UTF-8 (TOML); rename the file or directory it names");
    t = toml::table{{"v", value}};
  }
  f->set(c, *t.get("v"));
}

namespace {
// Which data a model trains on: the language models on text, bert on labelled text, the vision models on images.
void check_model_data(const Config& c) {
  const models::ModelInfo* info = models::find_model(c.model.name);
  if (!info) return;
  const bool tokens = info->input == models::ModelInput::kTokens;
  const std::string want = c.model.name == "bert" ? "text_classes" : tokens ? "text" : "";
  const bool text_data = c.data.dataset == "text" || c.data.dataset == "text_classes";
  if (c.model.name == "bert" && c.model.task != "classification")
    throw ConfigError(fmt::format("model.task = \"{}\" has no training loss in trainbox yet", c.model.task),
                      "fine-tune bert with model.task = \"classification\" on data.dataset = \"text_classes\" (the "
                      "mlm and encoder heads load, run and export)");
  if (want.empty() ? !text_data : c.data.dataset == want) return;
  throw ConfigError(
      fmt::format("model.name = \"{}\" cannot train on data.dataset = \"{}\"", c.model.name, c.data.dataset),
      c.model.name == "bert" && c.data.dataset == "text"
          ? "bert fine-tunes for classification on data.dataset = \"text_classes\"; masked-LM training is not "
            "supported yet"
          : "the language models (gpt, llama) train on data.dataset = \"text\", bert on \"text_classes\", and the "
            "vision models on idx, cifar10, synthetic, imagefolder or webdataset");
}

// model.lora.* and model.base_dtype: the family that has them, and what does not combine yet.
void check_lora(const Config& c) {
  const auto& m = c.model;
  if (m.lora_r == 0) {
    if (!m.lora_init_from.empty())
      throw ConfigError("model.lora.init_from needs LoRA on, but model.lora.r = 0",
                        "set model.lora.r (the adapter's adapter_config.json then sets it), or remove "
                        "model.lora.init_from");
    if (m.base_dtype != "fp32")
      throw ConfigError(fmt::format("model.base_dtype = \"{}\" applies to the frozen weights of LoRA, but "
                                    "model.lora.r = 0 trains every weight",
                                    m.base_dtype),
                        "set model.lora.r (e.g. 16) for a LoRA fine-tune, or train.amp = \"bf16\" for a full one");
    return;
  }
  if (m.name != "llama")
    throw ConfigError(
        fmt::format("model.lora.r = {}: LoRA is built for the llama family, not model.name = \"{}\"", m.lora_r, m.name),
        "use model.name = \"llama\" (a Hugging Face Llama, Qwen or Mistral folder), or model.lora.r = 0");
  if (c.dist.zero_stage >= 3)
    throw ConfigError(
        "dist.zero_stage = 3 with model.lora.r > 0 is not supported: stage 3 shards what trains, and "
        "the frozen base would stay whole on every rank anyway",
        "use dist.zero_stage = 1 or 2 (the adapters' optimizer state and gradients sharded), or 0");
  if (c.train.cuda_graphs)
    throw ConfigError("train.cuda_graphs = true with model.lora.r > 0 is not supported yet",
                      "set train.cuda_graphs = false");
}

// model.moe.*: the family that has them, the routing's shape, and what does not combine yet.
void check_moe(const Config& c) {
  const auto& m = c.model;
  if (m.moe_experts == 0) return;
  if (m.name != "llama")
    throw ConfigError(fmt::format("model.moe.experts = {}: a mixture of experts is built for the llama family, not "
                                  "model.name = \"{}\"",
                                  m.moe_experts, m.name),
                      "use model.name = \"llama\" (or a Mixtral / Qwen3-MoE folder), or model.moe.experts = 0");
  if (m.moe_top_k > m.moe_experts)
    throw ConfigError(fmt::format("model.moe.top_k = {} is larger than model.moe.experts = {}: each token is routed "
                                  "to top_k different experts",
                                  m.moe_top_k, m.moe_experts),
                      fmt::format("set model.moe.top_k to at most {} (Mixtral: 2 of 8)", m.moe_experts));
  auto refuse = [&](const std::string& what, const std::string& fix) {
    throw ConfigError(
        fmt::format("{} with a mixture of experts (model.moe.experts = {}) is not supported yet", what, m.moe_experts),
        fix);
  };
  if (m.lora_r > 0) refuse(fmt::format("model.lora.r = {}", m.lora_r), "set model.lora.r = 0 (a full fine-tune)");
  if (c.dist.zero_stage >= 3)
    refuse("dist.zero_stage = 3",
           "use dist.zero_stage = 1 or 2: the router's load-balancing loss reaches back "
           "through each layer's gathered weights after the forward");
  if (m.activation_checkpointing != "none")
    refuse(fmt::format("model.activation_checkpointing = \"{}\"", m.activation_checkpointing),
           "set model.activation_checkpointing = \"none\": a checkpointed layer returns one tensor, and the router's "
           "logits are a second output");
  if (c.train.cuda_graphs) refuse("train.cuda_graphs = true", "set train.cuda_graphs = false (routing is dynamic)");
}
}  // namespace

void validate(const Config& c) {
  check_lora(c);
  check_moe(c);
  if (c.dist.grad_compression == "powersgd" && c.dist.zero_stage >= 2)
    throw ConfigError(
        fmt::format("dist.grad_compression = \"powersgd\" does not combine with dist.zero_stage = {} "
                    "(P and Q are computed from each rank's whole gradient, which stage 2 reduce-scatters)",
                    c.dist.zero_stage),
        "use dist.zero_stage = 1 with powersgd, or dist.grad_compression = \"bf16\" with stage 2");
  if (c.dist.grad_compression != "none" && c.dist.zero_stage == 3)
    throw ConfigError(fmt::format("dist.grad_compression = \"{}\" does not combine with dist.zero_stage = 3 yet",
                                  c.dist.grad_compression),
                      "use dist.zero_stage = 2 with fp16/bf16, or dist.grad_compression = \"none\" with stage 3");
  if (c.dist.zero_stage > 0 && c.train.cuda_graphs)
    throw ConfigError(fmt::format("train.cuda_graphs = true is not supported with dist.zero_stage = {} (the step's "
                                  "all-gather and shard collectives are not captured)",
                                  c.dist.zero_stage),
                      "set train.cuda_graphs = false, or dist.zero_stage = 0");
  if (c.train.cuda_graphs && c.train.amp == Amp::kFp16)
    throw ConfigError(
        "train.cuda_graphs = true with train.amp = \"fp16\" is not supported (the loss scale's "
        "skip-step decision needs the host)",
        "use train.amp = \"bf16\" with CUDA graphs");
  if (c.train.global_batch_size > 0 && c.train.global_batch_size % c.train.accumulate != 0)
    throw ConfigError(fmt::format("train.global_batch_size = {} is not a multiple of train.accumulate = {}",
                                  c.train.global_batch_size, c.train.accumulate),
                      "choose a global batch that divides into accumulate micro-batches per rank");
  if (c.train.cuda_graphs && c.train.accumulate != 1)
    throw ConfigError(fmt::format("train.cuda_graphs = true needs train.accumulate = 1, got {}", c.train.accumulate),
                      "capture one optimizer step per replay: set train.accumulate = 1 or cuda_graphs = false");
  if (c.train.cuda_graphs && c.model.activation_checkpointing != "none")
    throw ConfigError(
        fmt::format("train.cuda_graphs = true with model.activation_checkpointing = \"{}\" is not supported "
                    "(the recomputation saves and restores the CUDA generator's state, which a capture "
                    "cannot replay)",
                    c.model.activation_checkpointing),
        "choose one: cuda_graphs = false, or model.activation_checkpointing = \"none\"");
  if (c.train.deterministic && c.train.cudnn_benchmark)
    throw ConfigError("train.deterministic = true and train.cudnn_benchmark = true contradict each other",
                      "choose one: deterministic (bit-identical reruns) or cudnn_benchmark (fastest algorithms)");
  if (c.optim.nesterov && (c.optim.name != "sgd" || c.optim.momentum <= 0))
    throw ConfigError("optim.nesterov = true needs optim.name = \"sgd\" and optim.momentum > 0",
                      "set optim.momentum (e.g. 0.9) or nesterov = false");
  if (c.model.name == "gpt" && c.model.n_embd % c.model.n_head != 0)
    throw ConfigError(
        fmt::format("model.n_embd = {} is not divisible by model.n_head = {}", c.model.n_embd, c.model.n_head),
        fmt::format("choose n_embd a multiple of n_head (e.g. n_embd = {})",
                    (c.model.n_embd / c.model.n_head + 1) * c.model.n_head));
  if (c.data.shuffle_buffer > 0 && c.data.dataset != "webdataset")
    throw ConfigError(fmt::format("data.shuffle_buffer = {} applies to tar shards, but data.dataset = \"{}\"",
                                  c.data.shuffle_buffer, c.data.dataset),
                      "remove data.shuffle_buffer (every other dataset is read as one permutation per epoch)");
  if (c.data.packing && c.data.dataset != "text")
    throw ConfigError(
        fmt::format("data.packing = true applies to token windows, but data.dataset = \"{}\"", c.data.dataset),
        "use data.dataset = \"text\" with token shards of trainbox data tokenize, or remove data.packing");
  if (c.data.packing && c.model.name != "llama")
    throw ConfigError(fmt::format("data.packing = true needs a model that restarts positions per document, and "
                                  "model.name = \"{}\" does not (llama does)",
                                  c.model.name),
                      "use model.name = \"llama\" (a Hugging Face Llama, Qwen or Mistral folder), or set "
                      "data.packing = false");
  if (c.model.sync_batchnorm && c.model.name.rfind("resnet", 0) != 0)
    throw ConfigError(
        fmt::format("model.sync_batchnorm = true, but model.name = \"{}\" has no BatchNorm", c.model.name),
        "use a resnet model, or remove model.sync_batchnorm");
  check_model_data(c);
  for (const auto* range : {&c.data.crop_scale, &c.data.crop_ratio})
    if ((*range)[0] > (*range)[1])
      throw ConfigError(
          fmt::format("data.{} = [{}, {}] is not a [min, max] range",
                      range == &c.data.crop_scale ? "crop_scale" : "crop_ratio", (*range)[0], (*range)[1]),
          "put the smaller value first");
}

std::string config_value(const Config& c, const std::string& key) {
  const Field* f = find_field(key);
  if (!f) unknown_key(key, "config_value()");
  return f->get(c);
}

namespace {
// The key whose value decides which keys of a section apply.
std::string selector_of(const std::string& section) {
  if (section == "model") return "model.name";
  if (section == "optim") return "optim.name";
  if (section == "data") return "data.dataset";
  if (section == "schedule") return "schedule.name";
  return "";
}

// The selector values a key is for ("mlp", "adam adamw"), from its doc; empty = all.
std::vector<std::string> applies_to(const Field& f) {
  const std::string section = f.info.key.substr(0, f.info.key.find('.'));
  const std::string selector = selector_of(section);
  const auto colon = f.info.doc.find(':');
  if (selector.empty() || selector == f.info.key || colon == std::string::npos) return {};
  const std::string allowed = find_field(selector)->info.allowed;  // "one of: mlp, cnn, resnet, gpt"
  const auto choices = split(allowed.substr(allowed.find(':') + 1), ',');
  std::vector<std::string> out;
  for (const auto& v : split(f.info.doc.substr(0, colon), '/')) {
    if (std::none_of(choices.begin(), choices.end(), [&](const std::string& c) { return trim(c) == v; })) return {};
    out.push_back(v);  // every word a selector value, or the prefix is prose ("CUDA: …")
  }
  return out;
}
}  // namespace

bool key_applies(const Config& c, const std::string& key) {
  const Field* f = find_field(key);
  if (!f) return true;
  const auto values = applies_to(*f);
  if (values.empty()) return true;
  std::string current = config_value(c, selector_of(key.substr(0, key.find('.'))));  // "\"cnn\"": a string
  if (current.size() >= 2 && current.front() == '"') current = current.substr(1, current.size() - 2);
  return std::find(values.begin(), values.end(), current) != values.end();
}

std::vector<std::string> ignored_keys(const Config& c) {
  const Config defaults;
  std::vector<std::string> out;
  for (const auto& f : fields()) {
    if (key_applies(c, f.info.key) || f.get(c) == f.get(defaults)) continue;
    const auto values = applies_to(f);
    const std::string selector = selector_of(f.info.key.substr(0, f.info.key.find('.')));
    std::string wanted;
    for (const auto& v : values) wanted += (wanted.empty() ? "" : " or ") + toml_value(v);
    out.push_back(fmt::format("{} = {} has no effect: it is for {} = {}, and this config says {}", f.info.key, f.get(c),
                              selector, wanted, config_value(c, selector)));
  }
  return out;
}

void check_resume_config(const Config& checkpoint, const Config& now, const std::string& where) {
  std::vector<std::string> keys;
  for (const auto& f : fields())
    if (starts_with(f.info.key, "model.") && f.info.key != "model.init_from" && f.info.key != "model.dropout" &&
        f.info.key != "model.lora.init_from" && f.info.key != "model.lora.dropout" &&
        !starts_with(f.info.key, "model.activation_checkpointing") &&  // how the backward runs, not the weights
        key_applies(checkpoint, f.info.key))
      keys.push_back(f.info.key);
  keys.push_back("optim.name");   // another optimizer has other state
  for (const auto& key : keys) {  // model.name first: the field table's order
    const std::string was = config_value(checkpoint, key), is = config_value(now, key);
    if (was == is) continue;
    throw ConfigError(
        fmt::format("{} was trained with {} = {}; this config says {}", where, key, was, is),
        fmt::format("continue it with its own config (trainbox train --run-dir DIR --resume auto, without a "
                    "config file, reads DIR/config.toml), set {} = {}, or train this config in a new --run-dir",
                    key, was));
  }
}

bool key_may_differ_between_nodes(const std::string& key) {
  // clang-format off
  static const std::array<const char*, 12> kPerNode = {
      "data.path", "data.val_path", "model.init_from", "model.lora.init_from",  // paths
      "data.workers", "data.prefetch", "train.threads",                       // this machine's cores
      "output.progress", "output.tensorboard", "checkpoint.keep",             // rank 0's outputs
      "checkpoint.export_safetensors", "debug.sample_log"};                   // and each rank's own
  // clang-format on
  return std::any_of(kPerNode.begin(), kPerNode.end(), [&](const char* k) { return key == k; });
}

std::string config_reference_markdown() {
  std::string out = "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& f : fields()) {
    auto esc = [](std::string t) {
      std::string r;
      for (char ch : t) r += ch == '|' ? std::string("\\|") : std::string(1, ch);
      return r;
    };
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", f.info.key, f.info.type, f.info.default_value,
                       esc(f.info.allowed), esc(f.info.doc));
  }
  return out;
}

std::string to_toml(const Config& c) {
  std::string out = "# trainbox resolved configuration (every key; see docs/config.md)\n";
  std::string section;
  for (const auto& f : fields()) {
    auto dot = f.info.key.find('.');
    std::string sec = f.info.key.substr(0, dot), name = f.info.key.substr(dot + 1);
    if (sec != section) {
      out += fmt::format("\n[{}]\n", sec);
      section = sec;
    }
    out += fmt::format("{} = {}\n", name, f.get(c));
  }
  return out;
}

}  // namespace trainbox::train
