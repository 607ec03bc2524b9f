// custom_model — your own model and dataset, trained by trainbox's Trainer: checkpoints and
// exact resume, AMP, TensorBoard, progress, and data parallelism under any launcher.
//   ./custom_model --run-dir runs/spirals
//   trainbox run --standalone --nproc-per-node 2 -- ./custom_model --run-dir runs/ddp
//   ./custom_model --run-dir runs/spirals --resume auto --set train.epochs=20
// The model is a small residual MLP with LayerNorm, its block marked as a unit for ZeRO stage 3
// (dist.zero_stage = 3 under a launcher); the data, three interleaved spirals in
// the plane (a classic that a linear model cannot separate), is a data::Source of its own.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <trainbox/data/source.h>
#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/models/weights.h>
#include <trainbox/train/config.h>
#include <trainbox/train/process_setup.h>
#include <trainbox/train/trainer.h>
#include <trainbox/util/errors.h>

// --- the model: any torch::nn::Module with a forward ---
// A residual block: LayerNorm, Linear, GELU, plus its input.
struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t width)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        hidden(register_module("hidden", torch::nn::Linear(width, width))) {}
  torch::Tensor forward(const torch::Tensor& h) { return h + torch::gelu(hidden(norm(h))); }
  torch::nn::LayerNorm norm;
  torch::nn::Linear hidden;
};
TORCH_MODULE(ResidualBlock);

struct SpiralNetImpl : torch::nn::Module {
  SpiralNetImpl(int64_t width, int64_t classes)
      : inp(register_module("inp", torch::nn::Linear(2, width))),
        block(register_module("block", ResidualBlock(width))),
        out(register_module("out", torch::nn::Linear(width, classes))) {
    // The block is a unit: with dist.zero_stage = 3 its parameters stay sharded over the ranks
    // and are gathered whole only around its forward and backward (unit() below runs those
    // hooks); an unmarked model is gathered whole for every step. Mark each repeated block of
    // a deeper model the same way (docs/trainer.md, "ZeRO stage 3: mark your blocks").
    trainbox::mark_unit(*block);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::gelu(inp(x));
    h = trainbox::unit(block, h);  // or trainbox::checkpointed(block, h): recomputed in the backward too
    return out(h);                 // logits [B, classes]
  }
  torch::nn::Linear inp;
  ResidualBlock block;
  torch::nn::Linear out;
};
TORCH_MODULE(SpiralNet);

// --- the data: anything with size() and get_batch(indices) ---
class Spirals : public trainbox::data::Source {
 public:
  Spirals(int64_t n, int64_t classes, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    y_ = torch::randint(classes, {n}, gen, torch::kInt64);
    auto r = torch::rand({n}, gen);  // radius in [0, 1)
    auto angle = r * 2.0 * M_PI + y_.to(torch::kFloat32) * (2.0 * M_PI / double(classes));
    auto noise = torch::randn({n, 2}, gen) * 0.05;
    x_ = torch::stack({r * torch::cos(angle), r * torch::sin(angle)}, 1) + noise;
  }
  int64_t size() const override { return x_.size(0); }
  trainbox::data::Example get_batch(const torch::Tensor& idx) const override {
    return {x_.index_select(0, idx), y_.index_select(0, idx)};
  }
  std::string describe() const override { return "spirals: " + std::to_string(size()) + " points"; }

 private:
  torch::Tensor x_, y_;
};

int main(int argc, char** argv) {
  trainbox::train::TrainOptions o;
  o.config.train.epochs = 8;
  o.config.train.batch_size = 64;
  o.config.train.log_every = 20;
  o.config.optim.lr = 1e-2;
  o.config.output.progress = "lines";
  bool wrong_shape = false;
  std::string export_to;
  for (int i = 1; i < argc; ++i) {  // --run-dir D  --resume auto|DIR  --set key=value  --export F  --wrong-shape
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        throw trainbox::UsageError(a + " needs a value", "see the comment at the top of custom_model.cpp");
      return argv[++i];
    };
    if (a == "--run-dir")
      o.run_dir = value();
    else if (a == "--resume")
      o.resume = value();
    else if (a == "--set")
      trainbox::train::apply_override(o.config, value());
    else if (a == "--export")
      export_to = value();
    else if (a == "--wrong-shape")
      wrong_shape = true;
    else if (a == "--quiet")
      o.quiet = true;
    else {
      std::fprintf(stderr, "custom_model: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    // The process settings `trainbox train` makes (malloc, cuBLAS determinism, NCCL), before torch does any work.
    trainbox::train::configure_process(trainbox::train::process_setup_for(o.config));
    const int64_t classes = 3;
    trainbox::data::Splits data;
    data.train = std::make_shared<Spirals>(4096, classes, /*seed=*/1);
    data.test = std::make_shared<Spirals>(1024, classes, /*seed=*/2);
    data.sample_shape = {2};
    data.classes = classes;
    data.description = "spirals: 4096 train, 1024 test, 3 classes";

    torch::manual_seed(static_cast<uint64_t>(o.config.train.seed));
    SpiralNet net(64, classes);
    trainbox::train::Trainer trainer(o);
    if (wrong_shape)  // a forward that forgot a reshape: the Trainer names both shapes
      trainer.model(net.ptr(), [m = net.get()](const torch::Tensor& x) { return m->forward(x).unsqueeze(1); });
    else
      trainer.model(net.ptr());
    trainer.data(data)
        .metric("confidence",  // your own metric: mean probability of the predicted class
                [](const torch::Tensor& logits, const torch::Tensor&) { return logits.softmax(-1).amax(-1).sum(); })
        .on_eval([](const trainbox::train::EvalInfo& e) {
          std::printf("eval %s%s epoch %lld: loss %.4f accuracy %.4f confidence %.4f\n", e.final ? "final " : "",
                      e.split.c_str(), static_cast<long long>(e.epoch), e.loss, e.accuracy, e.metrics.at("confidence"));
        });
    auto s = trainer.fit();
    std::printf("final: steps %lld test loss %.6f accuracy %.4f\n", static_cast<long long>(s.steps), s.test_loss,
                s.test_accuracy);
    if (!export_to.empty()) trainbox::models::save_weights(*net, export_to);
    return 0;
  } catch (const trainbox::Error& e) {
    return trainbox::report_error(e, "custom_model");
  }
}
