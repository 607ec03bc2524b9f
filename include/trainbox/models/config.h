// trainbox/models/config.h — the [model] section of the training config.
// (Parsed and documented with every other key in train/config.cpp's table.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainbox::models {

struct ModelConfig {
  std::string name = "mlp";                         // models/registry.h: mlp, cnn, resnet, resnet18, …
  std::vector<std::int64_t> hidden = {128};         // mlp: hidden layer sizes
  std::vector<std::int64_t> channels = {32, 64};    // cnn: conv channels (one per conv layer)
  std::int64_t fc = 128;                            // cnn: width of the hidden fully-connected layer
  std::int64_t width = 64;                          // resnet: channels of the first stage
  std::vector<std::int64_t> blocks = {2, 2, 2, 2};  // resnet: basic blocks per stage (ResNet-18)
  bool sync_batchnorm = false;                      // resnet*: BatchNorm over the global batch (SyncBatchNorm)
  // gpt: the nanoGPT / llm.c GPT-2 shape
  std::int64_t n_layer = 4;
  std::int64_t n_head = 4;
  std::int64_t n_embd = 128;
  std::int64_t block_size = 128;  // context length (tokens)
  double dropout = 0.0;
  bool bias = true;             // biases in Linear and LayerNorm layers
  std::int64_t vocab_size = 0;  // 0: the dataset's (256 for bytes)
  // gpt, resnet*: activation checkpointing (models/activation_checkpoint.h): "none", "blocks"
  // (every block), "every_k" (every activation_checkpointing_every-th block)
  std::string activation_checkpointing = "none";
  std::int64_t activation_checkpointing_every = 2;
  // any model: initial weights from a safetensors file with PyTorch state_dict names
  std::string init_from;
};

}  // namespace trainbox::models
