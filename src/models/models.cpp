#include <trainbox/models/models.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/models/bert.h>
#include <trainbox/models/gpt.h>
#include <trainbox/models/llama.h>
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

// --- BatchNorm2d that can normalise over every rank's samples (models.h: sync_batch_norm) ---
// y = x·scale + shift with the global batch's mean and variance: each rank's per-channel
// sum, sum of squares and count (float64, so E[x²] − E[x]² keeps its digits) are summed
// over the ranks by an autograd function whose backward sums the gradients the same way.
struct AllReduceSumFn : torch::autograd::Function<AllReduceSumFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& t, const AllReduceSum* sum) {
    ctx->saved_data["sum"] = reinterpret_cast<std::int64_t>(sum);  // owned by the module, which outlives the step
    auto out = t.clone();
    (*sum)(out);
    return out;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto* sum = reinterpret_cast<const AllReduceSum*>(ctx->saved_data["sum"].toInt());
    auto g = grads[0].contiguous().clone();
    (*sum)(g);
    return {g, torch::Tensor()};
  }
};

class SyncableBatchNorm2dImpl : public nn::BatchNorm2dImpl {
 public:
  using nn::BatchNorm2dImpl::BatchNorm2dImpl;
  void set_sync(std::shared_ptr<const AllReduceSum> sum) { sum_ = std::move(sum); }
  torch::Tensor forward(const torch::Tensor& x) {
    if (!sum_ || !is_training()) return nn::BatchNorm2dImpl::forward(x);
    const auto dims = std::vector<std::int64_t>{0, 2, 3};
    const auto xd = x.to(torch::kDouble);
    const double local_count = static_cast<double>(x.numel() / x.size(1));
    auto stats = torch::cat({xd.sum(dims), (xd * xd).sum(dims), torch::full({1}, local_count, xd.options())});
    if (*sum_) stats = AllReduceSumFn::apply(stats, sum_.get());
    const std::int64_t c = x.size(1);
    const auto count = stats.slice(0, 2 * c, 2 * c + 1);  // a tensor: no wait for the device
    const auto mean = stats.slice(0, 0, c) / count;
    const auto var = (stats.slice(0, c, 2 * c) / count - mean * mean).clamp_min(0);
    const auto invstd = torch::rsqrt(var + options.eps());
    const auto scale = weight.to(torch::kDouble) * invstd;
    const auto shift = bias.to(torch::kDouble) - mean * scale;
    {
      torch::NoGradGuard no_grad;
      const double m = options.momentum().value_or(0.1);
      running_mean.mul_(1 - m).add_(mean.detach().to(running_mean.scalar_type()), m);
      const auto n = count.detach();
      const auto unbias = torch::where(n > 1, n / (n - 1), torch::ones_like(n));
      running_var.mul_(1 - m).add_((var.detach() * unbias).to(running_var.scalar_type()), m);
      num_batches_tracked.add_(1);
    }
    const auto view = std::vector<std::int64_t>{1, c, 1, 1};
    return (x.to(torch::kFloat) * scale.to(torch::kFloat).view(view) + shift.to(torch::kFloat).view(view))
        .to(x.scalar_type());
  }

 private:
  std::shared_ptr<const AllReduceSum> sum_;
};
TORCH_MODULE(SyncableBatchNorm2d);

class BasicBlock : public nn::Module {
 public:
  // `in` channels in, `planes` × expansion out; the stride (2 at a stage's first block after
  // layer1) sits in the 3×3 conv: conv2 for a Bottleneck (torchvision's v1.5), conv1 here.
  BasicBlock(std::int64_t in, std::int64_t planes, std::int64_t stride, bool bottleneck) {
    const std::int64_t out = planes * (bottleneck ? 4 : 1);
    // registered in torchvision's order (conv1, bn1, conv2, bn2, …): state_dict keys in its order
    conv1_ = register_module("conv1", bottleneck ? conv(in, planes, 1) : conv(in, planes, 3, stride));
    bn1_ = register_module("bn1", SyncableBatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, bottleneck ? stride : 1));
    bn2_ = register_module("bn2", SyncableBatchNorm2d(planes));
    if (bottleneck) {
      conv3_ = register_module("conv3", conv(planes, out, 1));
      bn3_ = register_module("bn3", SyncableBatchNorm2d(out));
    }
    if (stride != 1 || in != out)
      downsample_ = register_module("downsample", nn::Sequential(conv(in, out, 1, stride), SyncableBatchNorm2d(out)));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    if (conv3_) y = bn3_->forward(conv3_->forward(torch::relu(y)));
    return torch::relu(y + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  SyncableBatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE_IMPL(BasicBlockHolder, BasicBlock);

class ResNet : public Model {
 public:
  ResNet(const ModelConfig& c, const InputShape& in, std::int64_t classes)
      : spec_(resnet_spec(c)), checkpoint_every_(checkpoint_every(c)) {
    const std::int64_t stem_k = spec_.imagenet_stem ? 7 : 3;
    conv1_ = register_module("conv1", conv(in.channels, spec_.width, stem_k, spec_.imagenet_stem ? 2 : 1));
    bn1_ = register_module("bn1", SyncableBatchNorm2d(spec_.width));
    std::int64_t ch = spec_.width;
    for (std::size_t s = 0; s < spec_.blocks.size(); ++s) {
      const std::int64_t planes = spec_.width << s;
      nn::Sequential stage;
      for (std::int64_t b = 0; b < spec_.blocks[s]; ++b) {
        BasicBlockHolder block(ch, planes, b == 0 && s > 0 ? 2 : 1, spec_.bottleneck);
        blocks_.push_back(block);
        stage->push_back(block);
        ch = planes * spec_.expansion();
      }
      stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
      mark_unit(*stages_.back());  // ZeRO stage 3's unit (activation checkpointing recomputes blocks)
    }
    fc_ = register_module("fc", nn::Linear(ch, classes));
    if (spec_.imagenet_stem) init_like_torchvision();
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(bn1_->forward(conv1_->forward(x)));
    if (spec_.imagenet_stem) x = torch::max_pool2d(x, 3, 2, 1);
    std::size_t first = 0;  // the stage's first block, counted over all stages
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      const auto n = static_cast<std::size_t>(spec_.blocks[s]);
      auto body = [this, s, first, n](const torch::Tensor& in) {
        if (checkpoint_every_ == 0) return stages_[s]->forward(in);
        // model.activation_checkpointing: the residual blocks, counted over all stages, recompute
        torch::Tensor y = in;
        for (std::size_t i = first; i < first + n; ++i)
          y = checkpoints_block(checkpoint_every_, static_cast<std::int64_t>(i)) ? checkpointed(blocks_[i], y)
                                                                                 : blocks_[i]->forward(y);
        return y;
      };
      x = run_unit(*stages_[s], body, x, /*recompute=*/false);
      first += n;
    }
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
  std::int64_t checkpoint_every_;         // 0: none; K: blocks K, 2K, … (models/activation_checkpoint.h)
  std::vector<BasicBlockHolder> blocks_;  // the stages' blocks in order (registered through stages_)
  nn::Conv2d conv1_{nullptr};
  SyncableBatchNorm2d bn1_{nullptr};
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

std::shared_ptr<Model> build_llama(const ModelConfig& c, const InputShape&, std::int64_t classes) {
  if (c.vocab_size > 0 && classes > c.vocab_size)
    throw ConfigError(
        fmt::format("model.vocab_size = {} is smaller than the dataset's vocabulary of {} tokens", c.vocab_size,
                    classes),
        fmt::format("use data whose token ids are below {}, or a model with a larger vocabulary", c.vocab_size));
  return make_llama(c, classes);  // `classes`: the dataset's vocabulary, when model.vocab_size is 0
}

std::shared_ptr<Model> build_bert(const ModelConfig& c, const InputShape&, std::int64_t classes) {
  return make_bert(c, classes);  // `classes`: the labelled text's classes (model.num_labels when > 0)
}

struct ModelBuilder {
  std::string_view name;
  std::shared_ptr<Model> (*build)(const ModelConfig&, const InputShape&, std::int64_t);
};
constexpr ModelBuilder kBuilders[] = {
    {"mlp", build<Mlp>},         {"cnn", build<Cnn>},         {"resnet", build<ResNet>},
    {"resnet18", build<ResNet>}, {"resnet34", build<ResNet>}, {"resnet50", build<ResNet>},
    {"gpt", build_gpt},          {"llama", build_llama},      {"bert", build_bert}};
static_assert(covers_exactly(kBuilders, [](const ModelInfo&) { return true; }),
              "every model in models/registry.h needs exactly one builder here, and only those");

}  // namespace

namespace {
thread_local bool skip_init = false;
}  // namespace
SkipInitGuard::SkipInitGuard(bool engage) : engaged_(engage), previous_(skip_init) {
  if (engaged_) skip_init = true;
}
SkipInitGuard::~SkipInitGuard() {
  if (engaged_) skip_init = previous_;
}
bool SkipInitGuard::active() { return skip_init; }

int sync_batch_norm(torch::nn::Module& model, AllReduceSum allreduce_sum) {
  const auto sum = std::make_shared<const AllReduceSum>(std::move(allreduce_sum));
  int n = 0;
  for (auto& m : model.modules(/*include_self=*/false))
    if (auto* bn = m->as<SyncableBatchNorm2dImpl>()) bn->set_sync(sum), ++n;
  return n;
}

std::shared_ptr<Model> make_model(const ModelConfig& c, const InputShape& in, std::int64_t classes) {
  for (const auto& b : kBuilders)
    if (b.name == c.name) return b.build(c, in, classes);
  throw ConfigError("model.name = \"" + c.name + "\" is not a model",
                    fmt::format("use one of: {}", fmt::join(model_names(), ", ")));
}

}  // namespace trainbox::models
