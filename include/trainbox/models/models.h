// trainbox/models/models.h — the built-in models, built by name (the names, one-line summaries
// and input kinds: models/registry.h, torch-free).
//
//   mlp     Flatten → [Linear → ReLU]* → Linear. Default hidden = {128}: the classic
//           PyTorch example's Net (fc1: 784→128, ReLU, fc2: 128→10).
//   cnn     [Conv3x3 → ReLU → MaxPool2]* → fc1 → ReLU → fc2 (default 2 convs: 32, 64).
//   resnet  ResNet-18-style: 3x3 stem (no max-pool, for 28×28 / 32×32 inputs), BasicBlock
//           stages (width, 2w, 4w, 8w; strides 1,2,2,2), global average pool, fc.
//   gpt     nanoGPT / llm.c GPT-2 (models/gpt.h): `classes` is the dataset's vocabulary
//           (model.vocab_size overrides it when > 0: vocab_size_for), InputShape is ignored;
//           forward takes int64 token ids [B, T] and returns logits [B, T, vocab].
// Parameter and buffer names equal those of the equivalent PyTorch modules
// (bench/peers/models.py), so exported safetensors load into them with load_state_dict.
//
//   auto net = trainbox::models::make_model(cfg.model, {1, 28, 28}, 10);
//   torch::Tensor logits = net->forward(images);    // [N, 10]
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/models/config.h>
#include <trainbox/models/registry.h>

namespace trainbox::models {

struct InputShape {
  std::int64_t channels = 1, height = 28, width = 28;
  std::int64_t numel() const { return channels * height * width; }
};

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Weight tying: further names under which PyTorch's state_dict carries a tensor this
  // module registers only once, as {alias, registered name}. Registering it once keeps the
  // optimizer, DDP and gradient clipping from seeing it twice; models/weights.h writes and
  // reads the aliases. GPT: {{"lm_head.weight", "transformer.wte.weight"}}.
  virtual std::vector<std::pair<std::string, std::string>> tied_weights() const { return {}; }
  // What a checkpoint of another task may hold or lack (a classifier started from a masked-LM
  // checkpoint): names starting with a `fresh` prefix may be missing from the file (they keep their
  // initialisation), names starting with an `unused` prefix may be in it (they are skipped).
  // models/weights.h's load_weights reports both. A file none of whose names start with
  // `base_prefix` is read as the bare base model's (BertModel's names under BertForMaskedLM's
  // "bert."): the prefix is added to each name. Empty: strict.
  struct LoadRules {
    std::vector<std::string> fresh, unused;
    std::string base_prefix;
  };
  virtual LoadRules load_rules() const { return {}; }
  // A term the model adds to the training loss, from its last forward in training mode (an MoE
  // router's load-balancing loss, its coefficient applied): a scalar, or undefined when there is none.
  virtual torch::Tensor auxiliary_loss() const { return {}; }
  // Counts kept over training forwards and handed over once, reset by the call: a mixture of experts'
  // tokens routed to each expert of each layer, int64 [layers, experts] on the CPU. Undefined: none.
  virtual torch::Tensor take_routing_counts() { return {}; }
};

// While an engaged one lives on this thread, families whose loading fills every tensor (llama)
// skip their own random initialisation: model.init_from overwrites it (a 7B model's normal_ draws
// cost seconds). A model built under it must be loaded before use.
class SkipInitGuard {
 public:
  explicit SkipInitGuard(bool engage);
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
  static bool active();

 private:
  bool engaged_, previous_;
};

// The registered model cfg.name (models/registry.h). Throws ConfigError for an unknown name or
// a shape the model cannot take.
std::shared_ptr<Model> make_model(const ModelConfig& cfg, const InputShape& input, std::int64_t classes);

// SyncBatchNorm (model.sync_batchnorm): from now on, in training, every BatchNorm of `model`
// normalises with the statistics of the whole global batch rather than this rank's share,
// as torch.nn.SyncBatchNorm does. `allreduce_sum` sums a float64 tensor in place over the
// ranks (data parallelism's process group); empty: this process alone, with the same
// arithmetic, so one process with batch 2b and two ranks with b each take the same steps.
// Its backward sums the statistics' gradients the same way. Returns how many BatchNorm
// layers it reached (0: the model has none). Evaluation uses the running statistics as usual.
using AllReduceSum = std::function<void(torch::Tensor&)>;
int sync_batch_norm(torch::nn::Module& model, AllReduceSum allreduce_sum);

}  // namespace trainbox::models
