// The bert family's modules and heads (models/bert.h).
#include <trainbox/models/bert.h>

#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/util/errors.h>

namespace trainbox::models {
namespace {

namespace nn = torch::nn;
using torch::Tensor;

constexpr double kInitStd = 0.02;  // transformers' initializer_range default

nn::Linear linear(std::int64_t in, std::int64_t out) { return nn::Linear(nn::LinearOptions(in, out)); }
nn::LayerNorm layer_norm(std::int64_t n, double eps) {
  return nn::LayerNorm(nn::LayerNormOptions({n}).eps(eps).elementwise_affine(true));
}

class EmbeddingsImpl : public nn::Module {
 public:
  EmbeddingsImpl(const ModelConfig& c, std::int64_t vocab, std::int64_t positions) : p_(c.dropout) {
    word_embeddings = register_module("word_embeddings",
                                      nn::Embedding(nn::EmbeddingOptions(vocab, c.n_embd).padding_idx(c.pad_token_id)));
    position_embeddings = register_module("position_embeddings", nn::Embedding(positions, c.n_embd));
    token_type_embeddings = register_module("token_type_embeddings", nn::Embedding(c.type_vocab_size, c.n_embd));
    LayerNorm = register_module("LayerNorm", layer_norm(c.n_embd, c.norm_eps));
  }
  Tensor forward(const Tensor& ids) {
    auto pos = torch::arange(ids.size(1), ids.options());
    auto x = word_embeddings->forward(ids) + position_embeddings->forward(pos) +
             token_type_embeddings->weight.select(0, 0);  // every token of segment 0
    return trainbox::dropout(LayerNorm->forward(x), p_, is_training());
  }
  nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  nn::LayerNorm LayerNorm{nullptr};  // transformers' name

 private:
  double p_;
};
TORCH_MODULE(Embeddings);

class SelfAttentionImpl : public nn::Module {
 public:
  explicit SelfAttentionImpl(const ModelConfig& c) {
    query = register_module("query", linear(c.n_embd, c.n_embd));
    key = register_module("key", linear(c.n_embd, c.n_embd));
    value = register_module("value", linear(c.n_embd, c.n_embd));
  }
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr};
};
TORCH_MODULE(SelfAttention);

class DenseNormImpl : public nn::Module {  // BertSelfOutput / BertOutput: dense, dropout, residual, LayerNorm
 public:
  DenseNormImpl(std::int64_t in, const ModelConfig& c) : p_(c.dropout) {
    dense = register_module("dense", linear(in, c.n_embd));
    LayerNorm = register_module("LayerNorm", layer_norm(c.n_embd, c.norm_eps));
  }
  Tensor forward(const Tensor& h, const Tensor& residual) {
    return LayerNorm->forward(trainbox::dropout(dense->forward(h), p_, is_training()) + residual);
  }
  nn::Linear dense{nullptr};
  nn::LayerNorm LayerNorm{nullptr};

 private:
  double p_;
};
TORCH_MODULE(DenseNorm);

class AttentionBlockImpl : public nn::Module {  // BertAttention: self + output
 public:
  explicit AttentionBlockImpl(const ModelConfig& c) {
    self = register_module("self", SelfAttention(c));
    output = register_module("output", DenseNorm(c.n_embd, c));
  }
  SelfAttention self{nullptr};
  DenseNorm output{nullptr};
};
TORCH_MODULE(AttentionBlock);

class IntermediateImpl : public nn::Module {
 public:
  IntermediateImpl(const ModelConfig& c, std::int64_t ffn) { dense = register_module("dense", linear(c.n_embd, ffn)); }
  nn::Linear dense{nullptr};
};
TORCH_MODULE(Intermediate);

class LayerImpl : public nn::Module {  // BertLayer
 public:
  LayerImpl(const ModelConfig& c, std::int64_t ffn) : heads_(c.n_head), p_(c.dropout) {
    attention = register_module("attention", AttentionBlock(c));
    intermediate = register_module("intermediate", Intermediate(c, ffn));
    output = register_module("output", DenseNorm(ffn, c));
  }
  // x [B, T, H]; keep [B, 1, 1, T] bool: the keys that are not padding.
  Tensor forward(const Tensor& x, const Tensor& keep) {
    const auto B = x.size(0), T = x.size(1), H = x.size(2), d = H / heads_;
    auto& s = attention->self;
    auto split = [&](nn::Linear& l) { return l->forward(x).view({B, T, heads_, d}).transpose(1, 2); };
    auto y = at::scaled_dot_product_attention(split(s->query), split(s->key), split(s->value), keep,
                                              is_training() ? p_ : 0.0, /*is_causal=*/false);
    auto h = attention->output->forward(y.transpose(1, 2).reshape({B, T, H}), x);
    return output->forward(torch::gelu(intermediate->dense->forward(h)), h);
  }
  AttentionBlock attention{nullptr};
  Intermediate intermediate{nullptr};
  DenseNorm output{nullptr};

 private:
  std::int64_t heads_;
  double p_;
};
TORCH_MODULE(Layer);

class EncoderImpl : public nn::Module {
 public:
  EncoderImpl(const ModelConfig& c, std::int64_t ffn) {
    layer = register_module("layer", nn::ModuleList());
    for (std::int64_t i = 0; i < c.n_layer; ++i) {
      layers.push_back(Layer(c, ffn));
      layer->push_back(layers.back());
      mark_unit(*layers.back());
    }
  }
  nn::ModuleList layer{nullptr};
  std::vector<Layer> layers;
};
TORCH_MODULE(Encoder);

class PoolerImpl : public nn::Module {
 public:
  explicit PoolerImpl(const ModelConfig& c) { dense = register_module("dense", linear(c.n_embd, c.n_embd)); }
  nn::Linear dense{nullptr};
};
TORCH_MODULE(Pooler);

class BertImpl : public nn::Module {  // BertModel: what transformers names `bert.`
 public:
  BertImpl(const ModelConfig& c, std::int64_t vocab, std::int64_t positions, std::int64_t ffn, bool pooler_too) {
    embeddings = register_module("embeddings", Embeddings(c, vocab, positions));
    encoder = register_module("encoder", Encoder(c, ffn));
    if (pooler_too) pooler = register_module("pooler", Pooler(c));
  }
  Embeddings embeddings{nullptr};
  Encoder encoder{nullptr};
  Pooler pooler{nullptr};
};
TORCH_MODULE(Bert);

class PredictionsImpl : public nn::Module {  // cls.predictions: transform, then the tied decoder + bias
 public:
  PredictionsImpl(const ModelConfig& c, std::int64_t vocab) {
    transform = register_module("transform", std::make_shared<nn::Module>());
    dense = transform->register_module("dense", linear(c.n_embd, c.n_embd));
    LayerNorm = transform->register_module("LayerNorm", layer_norm(c.n_embd, c.norm_eps));
    bias = register_parameter("bias", torch::zeros({vocab}));
  }
  std::shared_ptr<nn::Module> transform;  // a plain container: transformers' cls.predictions.transform
  nn::Linear dense{nullptr};
  nn::LayerNorm LayerNorm{nullptr};
  Tensor bias;
};
TORCH_MODULE(Predictions);

class BertModel : public Model {
 public:
  BertModel(const ModelConfig& c, std::int64_t vocab, std::int64_t labels)
      : mlm_(c.task == "mlm"),
        encoder_only_(c.task == "encoder"),
        pad_(c.pad_token_id),
        p_(c.dropout),
        checkpoint_every_(checkpoint_every(c)) {
    const std::int64_t ffn = c.intermediate_size > 0 ? c.intermediate_size : 4 * c.n_embd;
    const std::int64_t positions = c.max_position > 0 ? c.max_position : c.block_size;
    bert_ = Bert(c, vocab, positions, ffn, !mlm_);
    if (encoder_only_) {  // BertModel's own names: embeddings.…, encoder.…, pooler.…
      register_module("embeddings", bert_->embeddings);
      register_module("encoder", bert_->encoder);
      register_module("pooler", bert_->pooler);
    } else {
      register_module("bert", bert_);
    }
    if (encoder_only_) {
    } else if (mlm_) {
      cls_ = register_module("cls", std::make_shared<nn::Module>());
      predictions_ = cls_->register_module("predictions", Predictions(c, vocab));
    } else {
      classifier_ = register_module("classifier", linear(c.n_embd, labels));
    }
    init_weights();
  }

  Tensor forward(Tensor ids) override {
    if (ids.dim() != 2 || ids.size(1) < 1)
      throw UsageError(fmt::format("bert takes token ids of shape [batch, time], got {} dimensions", ids.dim()),
                       "pass an int64 tensor [B, T]");
    const auto keep = ids.ne(pad_).view({ids.size(0), 1, 1, ids.size(1)});
    auto x = bert_->embeddings->forward(ids);
    for (std::size_t i = 0; i < bert_->encoder->layers.size(); ++i) {
      auto* layer = bert_->encoder->layers[i].ptr().get();
      x = run_unit(
          *layer, [layer, keep](const Tensor& t) { return layer->forward(t, keep); }, x,
          checkpoints_block(checkpoint_every_, static_cast<std::int64_t>(i)));
    }
    if (encoder_only_) return x;  // last_hidden_state [B, T, hidden]
    if (mlm_) {
      auto& p = *predictions_;
      auto h = p.LayerNorm->forward(torch::gelu(p.dense->forward(x)));
      return torch::linear(h, bert_->embeddings->word_embeddings->weight, p.bias);
    }
    auto pooled = torch::tanh(bert_->pooler->dense->forward(x.select(1, 0)));
    return classifier_->forward(trainbox::dropout(pooled, p_, is_training()));
  }

  std::vector<std::pair<std::string, std::string>> tied_weights() const override {
    if (!mlm_) return {};
    return {{"cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"},
            {"cls.predictions.decoder.bias", "cls.predictions.bias"}};
  }
  LoadRules load_rules() const override {
    // Older files carry the constant position_ids / token_type_ids buffers: not weights.
    const std::vector<std::string> buffers = {"embeddings.position_ids", "embeddings.token_type_ids",
                                              "bert.embeddings.position_ids", "bert.embeddings.token_type_ids"};
    auto with = [&](std::vector<std::string> v) {
      v.insert(v.end(), buffers.begin(), buffers.end());
      return v;
    };
    if (encoder_only_) return {{"pooler."}, with({"cls."}), ""};
    if (mlm_) return {{}, with({"bert.pooler.", "cls.seq_relationship."}), "bert."};  // BertForPreTraining's
    return {{"bert.pooler.", "classifier."}, with({"cls."}), "bert."};  // a masked-LM or bare checkpoint's head
  }

 private:
  void init_weights() {  // transformers' BertPreTrainedModel._init_weights
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* l = m->as<nn::Linear>()) {
        nn::init::normal_(l->weight, 0.0, kInitStd);
        if (l->bias.defined()) nn::init::zeros_(l->bias);
      } else if (auto* e = m->as<nn::Embedding>()) {
        nn::init::normal_(e->weight, 0.0, kInitStd);
        if (e->options.padding_idx()) e->weight[*e->options.padding_idx()].zero_();
      }
    }
  }

  bool mlm_, encoder_only_;
  std::int64_t pad_;
  double p_;
  std::int64_t checkpoint_every_;
  Bert bert_{nullptr};
  std::shared_ptr<nn::Module> cls_;
  Predictions predictions_{nullptr};
  nn::Linear classifier_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_bert(const ModelConfig& c, std::int64_t classes) {
  const std::int64_t labels = c.num_labels > 0 ? c.num_labels : classes;
  if (c.vocab_size < 1)
    throw ConfigError(
        "bert needs model.vocab_size (its tokenizer's vocabulary)",
        "set model.vocab_size (256 for byte-level text), or model.init_from = a Hugging Face BERT folder");
  if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.n_embd % c.n_head != 0)
    throw ConfigError(fmt::format("bert needs n_embd divisible by n_head, got n_layer = {}, n_head = {}, n_embd = {}",
                                  c.n_layer, c.n_head, c.n_embd),
                      "choose n_embd a multiple of n_head");
  if (c.task != "mlm" && c.task != "classification" && c.task != "encoder")
    throw ConfigError(fmt::format("model.task = \"{}\" is not a bert head", c.task),
                      "use classification, mlm or encoder");
  if (c.task == "classification" && c.num_labels > 0 && classes > c.num_labels)
    throw ConfigError(
        fmt::format("the data has {} classes, the classifier model.num_labels = {}", classes, c.num_labels),
        fmt::format("set model.num_labels = {} (a new classifier head), or relabel the data", classes));
  if (c.task == "classification" && labels < 2)
    throw ConfigError(fmt::format("a bert classifier needs 2 labels or more, got {}", labels),
                      "set model.num_labels, or train on data.dataset = \"text_classes\"");
  if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size)
    throw ConfigError(
        fmt::format("model.pad_token_id = {} is outside the vocabulary of {}", c.pad_token_id, c.vocab_size),
        "use the tokenizer's [PAD] id (0 for BERT and for byte-level text)");
  const std::int64_t positions = c.max_position > 0 ? c.max_position : c.block_size;
  if (c.block_size > positions)
    throw ConfigError(fmt::format("model.block_size = {} exceeds the {} position embeddings", c.block_size, positions),
                      fmt::format("use model.block_size <= {}", positions));
  return std::make_shared<BertModel>(c, c.vocab_size, labels);
}

}  // namespace trainbox::models
