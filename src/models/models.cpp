#include <trainbox/models/models.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/models/gpt.h>
#include <trainbox/util/errors.h>

#include "resnet_spec.h"

namespace trainbox::models {
namespace {

namespace nn = torch::nn;

// --- mlp: the classic Net generalised to any number of hidden layers ---
class Mlp : public Model {
 public:
  Mlp(const ModelConfig& c, const InputShape& in, std::int64_t classes) {
    std::int64_t width = in.numel();
    std::vector<std::int64_t> sizes = c.hidden;
    sizes.push_back(classes);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      layers_.push_back(register_module("fc" + std::to_string(i + 1), nn::Linear(width, sizes[i])));
      width = sizes[i];
    }
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = x.flatten(1);
    for (std::size_t i = 0; i + 1 < layers_.size(); ++i) x = torch::relu(layers_[i]->forward(x));
    return layers_.back()->forward(x);
  }

 private:
  std::vector<nn::Linear> layers_;
};

// --- cnn: conv blocks then two fully-connected layers ---
class Cnn : public Model {
 public:
  Cnn(const ModelConfig& c, const InputShape& in, std::int64_t classes) {
    std::int64_t ch = in.channels, h = in.height, w = in.width;
    for (std::size_t i = 0; i < c.channels.size(); ++i) {
      convs_.push_back(register_module("conv" + std::to_string(i + 1),
                                       nn::Conv2d(nn::Conv2dOptions(ch, c.channels[i], 3).padding(1))));
      ch = c.channels[i];
      h /= 2;
      w /= 2;
      if (h < 1 || w < 1)
        throw ConfigError(
            fmt::format("model.channels has {} conv layers, too many for {}x{} inputs (each halves the size)",
                        c.channels.size(), in.height, in.width),
            "use fewer conv layers");
    }
    fc1_ = register_module("fc1", nn::Linear(ch * h * w, c.fc));
    fc2_ = register_module("fc2", nn::Linear(c.fc, classes));
  }
  torch::Tensor forward(torch::Tensor x) override {
    for (auto& conv : convs_) x = torch::max_pool2d(torch::relu(conv->forward(x)), 2);
    return fc2_->forward(torch::relu(fc1_->forward(x.flatten(1))));
  }

 private:
  std::vector<nn::Conv2d> convs_;
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// --- resnet: torchvision's BasicBlock / Bottleneck layout (models/resnet_spec.h) ---
// Parameter and buffer names are torchvision.models.resnet's, so a state_dict moves with
// load_state_dict(strict=True) both ways.
nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

class BasicBlock : public nn::Module {
 public:
  // `in` channels in, `planes` × expansion out; the stride (2 at a stage's first block after
  // layer1) sits in the 3×3 conv: conv2 for a Bottleneck (torchvision's v1.5), conv1 here.
  BasicBlock(std::int64_t in, std::int64_t planes, std::int64_t stride, bool bottleneck) {
    const std::int64_t out = planes * (bottleneck ? 4 : 1);
    // registered in torchvision's order (conv1, bn1, conv2, bn2, …): state_dict keys in its order
    conv1_ = register_module("conv1", bottleneck ? conv(in, planes, 1) : conv(in, planes, 3, stride));
    bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, bottleneck ? stride : 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
    if (bottleneck) {
      conv3_ = register_module("conv3", conv(planes, out, 1));
      bn3_ = register_module("bn3", nn::BatchNorm2d(out));
    }
    if (stride != 1 || in != out)
      downsample_ = register_module("downsample", nn::Sequential(conv(in, out, 1, stride), nn::BatchNorm2d(out)));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    if (conv3_) y = bn3_->forward(conv3_->forward(torch::relu(y)));
    return torch::relu(y + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE_IMPL(BasicBlockHolder, BasicBlock);

class ResNet : public Model {
 public:
  ResNet(const ModelConfig& c, const InputShape& in, std::int64_t classes) : spec_(resnet_spec(c)) {
    const std::int64_t stem_k = spec_.imagenet_stem ? 7 : 3;
    conv1_ = register_module("conv1", conv(in.channels, spec_.width, stem_k, spec_.imagenet_stem ? 2 : 1));
    bn1_ = register_module("bn1", nn::BatchNorm2d(spec_.width));
    std::int64_t ch = spec_.width;
    for (std::size_t s = 0; s < spec_.blocks.size(); ++s) {
      const std::int64_t planes = spec_.width << s;
      nn::Sequential stage;
      for (std::int64_t b = 0; b < spec_.blocks[s]; ++b) {
        stage->push_back(BasicBlockHolder(ch, planes, b == 0 && s > 0 ? 2 : 1, spec_.bottleneck));
        ch = planes * spec_.expansion();
      }
      stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
    }
    fc_ = register_module("fc", nn::Linear(ch, classes));
    if (spec_.imagenet_stem) init_like_torchvision();
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(bn1_->forward(conv1_->forward(x)));
    if (spec_.imagenet_stem) x = torch::max_pool2d(x, 3, 2, 1);
    for (auto& s : stages_) x = s->forward(x);
    return fc_->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }

 private:
  // torchvision's ResNet.__init__: convolutions kaiming_normal_(fan_out, relu), BatchNorm
  // weight 1 and bias 0, Linear left at its default. (The small `resnet` keeps LibTorch's
  // defaults, as it always has: its checkpoints and curves stay what they were.)
  void init_like_torchvision() {
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* cv = m->as<nn::Conv2d>()) nn::init::kaiming_normal_(cv->weight, 0, torch::kFanOut, torch::kReLU);
      if (auto* bn = m->as<nn::BatchNorm2d>()) nn::init::ones_(bn->weight), nn::init::zeros_(bn->bias);
    }
  }

  ResNetSpec spec_;
  nn::Conv2d conv1_{nullptr};
  nn::BatchNorm2d bn1_{nullptr};
  std::vector<nn::Sequential> stages_;
  nn::Linear fc_{nullptr};
};

// --- the builders, one per registered model (models/registry.h) ---
template <class M>
std::shared_ptr<Model> build(const ModelConfig& c, const InputShape& in, std::int64_t classes) {
  return std::make_shared<M>(c, in, classes);
}
std::shared_ptr<Model> build_gpt(const ModelConfig& c, const InputShape&, std::int64_t classes) {
  return make_gpt(c, vocab_size_for(c, classes));  // `classes`: the dataset's vocabulary
}

struct ModelBuilder {
  std::string_view name;
  std::shared_ptr<Model> (*build)(const ModelConfig&, const InputShape&, std::int64_t);
};
constexpr ModelBuilder kBuilders[] = {
    {"mlp", build<Mlp>},         {"cnn", build<Cnn>},         {"resnet", build<ResNet>}, {"resnet18", build<ResNet>},
    {"resnet34", build<ResNet>}, {"resnet50", build<ResNet>}, {"gpt", build_gpt}};
static_assert(covers_exactly(kBuilders, [](const ModelInfo&) { return true; }),
              "every model in models/registry.h needs exactly one builder here, and only those");

}  // namespace

std::shared_ptr<Model> make_model(const ModelConfig& c, const InputShape& in, std::int64_t classes) {
  for (const auto& b : kBuilders)
    if (b.name == c.name) return b.build(c, in, classes);
  throw ConfigError("model.name = \"" + c.name + "\" is not a model",
                    fmt::format("use one of: {}", fmt::join(model_names(), ", ")));
}

}  // namespace trainbox::models
