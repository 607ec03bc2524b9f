// trainbox/models/registry.h — the built-in models by name: the one list of them.
//
// Torch-free on purpose: the config parser (train/config.cpp, in the torch-free
// trainbox_core library) validates model.name against it, and the CLI help and the docs
// checks read it, none of which may link LibTorch. What builds a model lives with the model
// code (src/models/models.cpp: make_model), what writes its ONNX graph in src/models/onnx.cpp;
// both keep a table keyed by these names, and a static_assert there (covers_exactly) fails
// the build when a table and this list disagree. So adding a model is: an entry here, a
// builder, a graph writer if onnx is true, and its config keys in train/config.cpp's field
// table, whose doc prefix ("mlp: …") decides which keys apply (a unit test holds `keys`
// below to it, and docs/models.md's table to this list).
//
//   if (const models::ModelInfo* m = models::find_model(cfg.model.name); m && m->onnx) …
//   for (const auto& m : models::kModels) std::cout << m.name << "  " << m.summary << "\n";
#pragma once
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::models {

// What forward() takes: images [N, C, H, W] (float) or token ids [B, T] (int64).
enum class ModelInput { kImages, kTokens };

struct ModelInfo {
  std::string_view name;     // model.name
  std::string_view summary;  // one line: the architecture (docs/models.md's "what")
  ModelInput input;
  std::string_view keys;  // its own [model] keys, ", "-separated, without "model." (docs/models.md)
  bool onnx;              // `trainbox export … OUT.onnx` has a graph writer for it
};

inline constexpr ModelInfo kModels[] = {
    {"mlp", "Flatten → [Linear → ReLU]* → Linear (default: the classic Net 784-128-10)", ModelInput::kImages, "hidden",
     true},
    {"cnn", "[Conv3×3 → ReLU → MaxPool2]* → fc1 → ReLU → fc2", ModelInput::kImages, "channels, fc", true},
    {"resnet", "ResNet-18-style BasicBlocks, 3×3 stem without max-pool (28×28 / 32×32 images)", ModelInput::kImages,
     "width, blocks, activation_checkpointing, activation_checkpointing_every", true},
    {"resnet18", "torchvision's resnet18: 7×7 stem + max-pool, BasicBlocks [2,2,2,2] (ImageNet-sized images)",
     ModelInput::kImages, "activation_checkpointing, activation_checkpointing_every", true},
    {"resnet34", "torchvision's resnet34: 7×7 stem + max-pool, BasicBlocks [3,4,6,3] (ImageNet-sized images)",
     ModelInput::kImages, "activation_checkpointing, activation_checkpointing_every", true},
    {"resnet50", "torchvision's resnet50: 7×7 stem + max-pool, Bottlenecks [3,4,6,3] (ImageNet-sized images)",
     ModelInput::kImages, "activation_checkpointing, activation_checkpointing_every", true},
    {"gpt", "nanoGPT / llm.c GPT-2 language model", ModelInput::kTokens,
     "n_layer, n_head, n_embd, block_size, dropout, bias, vocab_size, activation_checkpointing, "
     "activation_checkpointing_every",
     true},
    {"llama",
     "Llama-family decoder: Llama 2/3.x, Qwen2/2.5, Qwen3, Mistral, Mixtral, Qwen3-MoE (RMSNorm, SwiGLU, RoPE, "
     "grouped-query "
     "attention); reads and writes Hugging Face folders",
     ModelInput::kTokens,
     "n_layer, n_head, n_embd, block_size, vocab_size, activation_checkpointing, activation_checkpointing_every, "
     "n_kv_head, head_dim, intermediate_size, rope_theta, rope_scaling, rope_factor, rope_low_freq_factor, "
     "rope_high_freq_factor, rope_original_max_position, max_position, norm_eps, tie_embeddings, qkv_bias, o_bias, "
     "qk_norm, sliding_window, hf_architecture, eos_token_ids, bos_token_id, lora.r, lora.alpha, lora.dropout, "
     "lora.target_modules, lora.rslora, lora.init_from, base_dtype, moe.experts, moe.top_k, moe.intermediate_size, "
     "moe.norm_topk, moe.aux_loss, moe.aux_loss_coef, moe.collapse_share",
     true},
    {"bert",
     "BERT encoder (BertModel) with a sequence-classification or masked-LM head; reads and writes Hugging Face "
     "folders",
     ModelInput::kTokens,
     "n_layer, n_head, n_embd, block_size, dropout, vocab_size, activation_checkpointing, "
     "activation_checkpointing_every, intermediate_size, max_position, norm_eps, hf_architecture, task, num_labels, "
     "type_vocab_size, pad_token_id",
     true},
};

constexpr const ModelInfo* find_model(std::string_view name) {
  for (const auto& m : kModels)
    if (m.name == name) return &m;
  return nullptr;
}

// Whether `table` (entries with a .name) holds each registered model that `wanted` selects
// exactly once, and nothing else: for static_asserts beside the builder and writer tables.
template <class Table, class Pred>
constexpr bool covers_exactly(const Table& table, Pred wanted) {
  std::size_t selected = 0;
  for (const auto& m : kModels) {
    if (!wanted(m)) continue;
    ++selected;
    std::size_t found = 0;
    for (const auto& e : table) found += e.name == m.name ? 1 : 0;
    if (found != 1) return false;
  }
  return selected == std::size(table);
}

// The names, in registry order ({"mlp", "cnn", "resnet", "resnet18", …, "gpt"}), optionally only those with
// an ONNX writer.
inline std::vector<std::string> model_names(bool onnx_only = false) {
  std::vector<std::string> out;
  for (const auto& m : kModels)
    if (m.onnx || !onnx_only) out.emplace_back(m.name);
  return out;
}

}  // namespace trainbox::models
