// The shape of every built-in ResNet, from its model config: the one place that says what
// `resnet` (small images) and torchvision's `resnet18` / `resnet34` / `resnet50` (ImageNet
// shapes) are. The module (models.cpp) and the ONNX graph writer (onnx.cpp) both build from
// it, so the two cannot disagree. Torch-free.
#pragma once
#include <cstdint>
#include <vector>

#include <trainbox/models/config.h>

namespace trainbox::models {

struct ResNetSpec {
  // true: torchvision's ImageNet stem, conv1 7×7 stride 2 + max-pool 3×3 stride 2 (input
  // 224×224 → 56×56 at layer1); false: a 3×3 stride-1 stem without max-pool for 28×28 / 32×32.
  bool imagenet_stem = false;
  bool bottleneck = false;           // Bottleneck blocks (1×1 → 3×3 → 1×1, expansion 4) vs BasicBlock
  std::int64_t width = 64;           // channels of layer1's blocks (torchvision's planes 64)
  std::vector<std::int64_t> blocks;  // blocks per stage; stage s has width << s planes
  std::int64_t expansion() const { return bottleneck ? 4 : 1; }
};

// torchvision.models.resnet18/34/50 (`torchvision/models/resnet.py`: v1.5, the stride in
// the 3×3 conv of a Bottleneck), or the small-image `resnet` from model.width/model.blocks.
inline ResNetSpec resnet_spec(const ModelConfig& c) {
  if (c.name == "resnet18") return {true, false, 64, {2, 2, 2, 2}};
  if (c.name == "resnet34") return {true, false, 64, {3, 4, 6, 3}};
  if (c.name == "resnet50") return {true, true, 64, {3, 4, 6, 3}};
  return {false, false, c.width, c.blocks};
}

}  // namespace trainbox::models
