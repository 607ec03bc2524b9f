// trainbox/models/bert.h — the BERT encoder family (model.name = "bert"): Hugging Face's BertModel
// with its masked-LM head (BertForMaskedLM) or its sequence-classification head
// (BertForSequenceClassification), read from and written to Hugging Face folders.
//
// The architecture (src/models/bert/model.cpp), post-LayerNorm as BERT has it:
//   embeddings  word + position + token type (all type 0), LayerNorm, dropout
//   n_layer ×   h = LayerNorm(x + dense(attn(x)));  x = LayerNorm(h + dense(gelu(intermediate(h))))
//               attention: softmax(q·kᵀ/√d + padding mask)·v through at::scaled_dot_product_attention,
//               the keys whose id is model.pad_token_id masked out (transformers takes that mask
//               as attention_mask; trainbox derives it from the ids)
//   mlm         cls.predictions: dense → gelu → LayerNorm → decoder tied to the word embeddings + bias
//               → logits [B, T, vocab]
//   classification  bert.pooler: tanh(dense(h[:, 0])) → dropout → classifier → logits [B, num_labels]
// GELU is the exact (erf) one, transformers' "gelu". Parameter names are transformers' (bert.…, cls.…,
// classifier.…), so the strict loader reads a save_pretrained folder as it is. A classifier started
// from a masked-LM checkpoint (bert-base-*: BertForMaskedLM / BertForPreTraining) leaves the file's
// cls.* tensors unused and starts the pooler (when absent) and classifier fresh, as transformers
// does: Model::load_rules says so, and the load report names them.
// Units: each encoder layer (activation checkpointing, ZeRO stage 3).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <trainbox/models/config.h>
#include <trainbox/models/models.h>

namespace trainbox::models {

// Fills the bert keys of `cfg` (name = "bert", task from the architecture unless the config says
// classification for a masked-LM folder) from DIR/config.json. BertModel, BertForMaskedLM,
// BertForPreTraining and BertForSequenceClassification are read; other architectures, activations
// other than gelu, and position embeddings other than absolute are ConfigErrors naming the key.
std::vector<std::string> read_bert_config(const std::string& dir, ModelConfig& cfg);

// config.json for `cfg` as BertForMaskedLM or BertForSequenceClassification (by cfg.task).
std::string bert_config_json(const ModelConfig& cfg, const std::string& dtype);

// Builds the bert of `cfg`; `classes` is the dataset's class count (num_labels when 0).
std::shared_ptr<Model> make_bert(const ModelConfig& cfg, std::int64_t classes);

}  // namespace trainbox::models
