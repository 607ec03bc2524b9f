// trainbox/models/hf_export.h — a model written as a Hugging Face folder (`trainbox export CKPT OUT
// --format hf`): what transformers' from_pretrained loads with no missing or unexpected keys.
//
//   llama  config.json (models/llama.h: hf_config_json, the architecture it was read from),
//          generation_config.json, the weights under their own names (Hugging Face's), a tied
//          lm_head.weight left out as save_pretrained leaves it out.
//   gpt    GPT2LMHeadModel: config.json with activation_function "gelu" (the exact GELU trainbox's
//          GPT computes), the attention and MLP weights transposed to Conv1D's [in, out].
// Weights: model.safetensors, or model-0000k-of-0000N.safetensors shards of at most
// max_shard_bytes each with model.safetensors.index.json, as save_pretrained writes them.
// The tokenizer's files of `tokenizer_from` (the model.init_from folder) are copied beside them.
//
// Contract: OUT must not exist (or be an empty folder); the folder is written as OUT.tmp.<pid> and
// renamed to OUT when complete, so OUT is whole or absent. UsageError for a model without a Hugging
// Face layout or an OUT that exists; SystemError for I/O failures (the temp folder is removed).
//
//   auto r = models::write_hf_folder(*model, cfg.model, "out/qwen-ft", {});
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <trainbox/models/config.h>
#include <trainbox/models/models.h>

namespace trainbox::models {

struct HfExportOptions {
  std::uint64_t max_shard_bytes = 5'000'000'000;  // save_pretrained's default, "5GB"
  std::string tokenizer_from;                     // a folder whose tokenizer files are copied ("": none)
};
struct HfExportResult {
  std::vector<std::string> files;  // written, in OUT (names only)
  std::size_t tensors = 0;
  std::size_t shards = 1;
};

HfExportResult write_hf_folder(Model& model, const ModelConfig& cfg, const std::string& out,
                               const HfExportOptions& options);

// The tokenizer files a Hugging Face folder may hold, which write_hf_folder copies.
inline constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
    "vocab.txt",      "added_tokens.json",     "chat_template.jinja"};

}  // namespace trainbox::models
