// The shape of every built-in ResNet, from its model config: the one place that says what
// `resnet` (small images) and torchvision's `resnet18` / `resnet34` / `resnet50` (ImageNet
// shapes) are. The module (models.cpp) and the ONNX graph writer (onnx.cpp) both build from
// it, so the two cannot disagree. Torch-free.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <trainbox/models/config.h>
#include <trainbox/models/registry.h>
#include <trainbox/util/errors.h>

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

// The built-in ResNets by model name: torchvision.models.resnet18/34/50
// (`torchvision/models/resnet.py`: v1.5, the stride in the 3×3 conv of a Bottleneck), and the
// small-image `resnet`, whose width and blocks come from model.width / model.blocks.
struct ResNetShape {
  std::string_view name;  // model.name (models/registry.h)
  bool imagenet_stem, bottleneck;
  std::int64_t width;                  // 0: model.width
  std::array<std::int64_t, 4> blocks;  // all 0: model.blocks
};
inline constexpr ResNetShape kResNets[] = {
    {"resnet", false, false, 0, {0, 0, 0, 0}},
    {"resnet18", true, false, 64, {2, 2, 2, 2}},
    {"resnet34", true, false, 64, {3, 4, 6, 3}},
    {"resnet50", true, true, 64, {3, 4, 6, 3}},
};
// A model named resnet* in the registry without a shape here (or a shape for no model) fails the build.
static_assert(covers_exactly(kResNets, [](const ModelInfo& m) { return m.name.starts_with("resnet"); }),
              "every model named resnet* in models/registry.h needs exactly one shape here, and only those");

// ConfigError for a name that is not a ResNet's (a builder or writer called for the wrong model).
inline ResNetSpec resnet_spec(const ModelConfig& c) {
  for (const auto& r : kResNets) {
    if (r.name != c.name) continue;
    if (r.width == 0) return {r.imagenet_stem, r.bottleneck, c.width, c.blocks};
    return {r.imagenet_stem, r.bottleneck, r.width, {r.blocks.begin(), r.blocks.end()}};
  }
  std::string names;
  for (const auto& r : kResNets) names += (names.empty() ? "" : ", ") + std::string(r.name);
  throw ConfigError("model.name = '" + c.name + "' is not a ResNet", "a ResNet is one of: " + names);
}

}  // namespace trainbox::models
