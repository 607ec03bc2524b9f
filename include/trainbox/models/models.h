// trainbox/models/models.h — the built-in models, registered by name.
//
//   mlp     Flatten → [Linear → ReLU]* → Linear. Default hidden = {128}: the classic
//           PyTorch example's Net (fc1: 784→128, ReLU, fc2: 128→10).
//   cnn     [Conv3x3 → ReLU → MaxPool2]* → fc1 → ReLU → fc2 (default 2 convs: 32, 64).
//   resnet  ResNet-18-style: 3x3 stem (no max-pool, for 28×28 / 32×32 inputs), BasicBlock
//           stages (width, 2w, 4w, 8w; strides 1,2,2,2), global average pool, fc.
// Parameter and buffer names equal those of the equivalent PyTorch modules
// (bench/peers/models.py), so exported safetensors load into them with load_state_dict.
//
//   auto net = trainbox::models::make_model(cfg.model, {1, 28, 28}, 10);
//   torch::Tensor logits = net->forward(images);    // [N, 10]
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/train/config.h>

namespace trainbox::models {

struct InputShape {
  std::int64_t channels = 1, height = 28, width = 28;
  std::int64_t numel() const { return channels * height * width; }
};

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// Throws ConfigError for an unknown name or a shape the model cannot take.
std::shared_ptr<Model> make_model(const train::ModelConfig& cfg, const InputShape& input, std::int64_t classes);
std::vector<std::string> model_names();

}  // namespace trainbox::models
