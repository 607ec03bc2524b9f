// The bert family's Hugging Face config.json, read into model.* keys and written back (models/bert.h).
#include <trainbox/models/bert.h>

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/util/errors.h>

#include <trainbox/models/hf_json.h>

namespace trainbox::models {
namespace {

using hf::int_of;
using hf::real_of;
using hf::value_or;
using nlohmann::json;

[[noreturn]] void unsupported(const std::string& file, const std::string& what, const std::string& supported) {
  hf::unsupported(file, what, supported, "bert");
}

// The architectures read, and the head each one carries.
struct BertArchitecture {
  std::string_view architecture, task;
};
constexpr BertArchitecture kBertArchitectures[] = {{"BertModel", "encoder"},
                                                   {"BertForMaskedLM", "mlm"},
                                                   {"BertForPreTraining", "mlm"},
                                                   {"BertForSequenceClassification", "classification"}};

}  // namespace

std::vector<std::string> read_bert_config(const std::string& dir, ModelConfig& c) {
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  const json j = hf::read_json(file);
  const std::string arch = hf::architecture(j);
  const BertArchitecture* found = nullptr;
  for (const auto& a : kBertArchitectures)
    if (arch == a.architecture) found = &a;
  if (!found)
    unsupported(file, fmt::format("architectures \"{}\"", arch),
                "model.name = \"bert\" reads BertModel, BertForMaskedLM, BertForPreTraining and "
                "BertForSequenceClassification");
  const std::string act = value_or<std::string>(j, "hidden_act", "gelu");
  if (act != "gelu") unsupported(file, fmt::format("hidden_act \"{}\"", act), "the exact gelu is");
  const std::string pos = value_or<std::string>(j, "position_embedding_type", "absolute");
  if (pos != "absolute") unsupported(file, fmt::format("position_embedding_type \"{}\"", pos), "absolute is");
  if (j.contains("quantization_config") && !j["quantization_config"].is_null())
    unsupported(file, "quantization_config (a quantized checkpoint)", "bf16, fp16 and fp32 weights are");
  c.name = "bert";
  c.hf_architecture = arch;
  // A classifier fine-tuned from a masked-LM or bare checkpoint keeps the config's task (the common case:
  // bert-base-* is BertForMaskedLM, the run is classification); a classification folder is read as one.
  if (found->task == std::string_view("classification") || c.task != "classification")
    c.task = std::string(found->task);
  if (found->task == std::string_view("encoder") && c.task == "mlm") c.task = "encoder";
  c.vocab_size = int_of(j, "vocab_size", 30522, file);
  c.n_embd = int_of(j, "hidden_size", 768, file);
  c.n_layer = int_of(j, "num_hidden_layers", 12, file);
  c.n_head = int_of(j, "num_attention_heads", 12, file);
  c.intermediate_size = int_of(j, "intermediate_size", 3072, file);
  c.max_position = int_of(j, "max_position_embeddings", 512, file);
  c.type_vocab_size = int_of(j, "type_vocab_size", 2, file);
  c.norm_eps = real_of(j, "layer_norm_eps", 1e-12, file);
  c.pad_token_id = int_of(j, "pad_token_id", 0, file);
  c.dropout = real_of(j, "hidden_dropout_prob", 0.1, file);
  if (found->task == std::string_view("classification")) {
    const auto labels = j.contains("id2label") && j["id2label"].is_object() ? j["id2label"].size() : 0;
    c.num_labels = labels > 0 ? static_cast<std::int64_t>(labels) : int_of(j, "num_labels", 2, file);
  }
  if (c.block_size <= 0 || c.block_size > c.max_position) c.block_size = std::min<std::int64_t>(c.max_position, 512);
  return {fmt::format("{} ({} layers, {} heads, hidden {}), read as model.task = \"{}\"", arch, c.n_layer, c.n_head,
                      c.n_embd, c.task)};
}

std::string bert_config_json(const ModelConfig& c, const std::string& dtype) {
  const std::string arch = c.task == "mlm"              ? "BertForMaskedLM"
                           : c.task == "classification" ? "BertForSequenceClassification"
                                                        : "BertModel";
  json j = {{"architectures", {arch}},
            {"model_type", "bert"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.n_embd},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"intermediate_size", c.intermediate_size > 0 ? c.intermediate_size : 4 * c.n_embd},
            {"hidden_act", "gelu"},
            {"hidden_dropout_prob", c.dropout},
            {"attention_probs_dropout_prob", c.dropout},
            {"max_position_embeddings", c.max_position > 0 ? c.max_position : c.block_size},
            {"type_vocab_size", c.type_vocab_size},
            {"initializer_range", 0.02},
            {"layer_norm_eps", c.norm_eps},
            {"pad_token_id", c.pad_token_id},
            {"position_embedding_type", "absolute"},
            {"tie_word_embeddings", true},
            {"dtype", dtype}};
  if (c.task == "classification") {
    json id2label = json::object(), label2id = json::object();
    for (std::int64_t i = 0; i < c.num_labels; ++i) {
      id2label[std::to_string(i)] = fmt::format("LABEL_{}", i);
      label2id[fmt::format("LABEL_{}", i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  return j.dump(2) + "\n";
}

}  // namespace trainbox::models
