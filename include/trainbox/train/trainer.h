// trainbox/train/trainer.h — the training loop as a library: your model, your data, all of
// trainbox's machinery (think Lightning Fabric, in C++).
//
// Give a Trainer any torch::nn::Module with a forward that returns logits (or a step
// function of your own), a dataset (data/source.h), optionally a loss and metrics, and
// fit() runs the job the config describes: DDP under any launcher (trainbox run, torchrun,
// Slurm), AMP with a GradScaler, gradient accumulation and clipping, LR schedules, atomic
// checkpoints and exact resume, TensorBoard, metrics.jsonl, progress, divergence stop,
// and CUDA graphs where the model allows. `trainbox train` is this class plus the
// built-in models and datasets (train/run.h).
//
//   auto net = std::make_shared<MyNet>();
//   trainbox::train::Trainer t(opts);                 // TrainOptions: config, run dir, resume
//   t.model(net)                                       // calls net->forward(x)
//    .data(splits)                                     // data::Splits: train, val/test Sources
//    .on_step([](const StepInfo& s) { ... });
//   TrainSummary s = t.fit();
//
// The loss defaults to cross-entropy on logits [B, C] with targets [B], or [B, T, C] with
// targets [B, T] (per position, as a language model); any other shape is a UsageError
// naming both shapes. Resume restores the module's parameters and buffers by name, the
// optimizer, the loss scale, the RNG and the position in the epoch: the resumed run is the
// uninterrupted one, step for step.
// fit() leaves process-wide state alone (environment, allocator); the settings `trainbox train`
// makes before it are one call, train::configure_process() (train/process_setup.h).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/data/source.h>
#include <trainbox/train/step.h>
#include <trainbox/train/types.h>

namespace trainbox::train {

// ForwardFn, LossFn and MetricFn: train/step.h; TrainOptions, TrainSummary, DivergedError: train/types.h.

struct StepInfo {
  std::int64_t epoch = 0, step = 0;  // 1-based epoch; optimizer steps done
  double loss = 0, lr = 0, samples_per_s = 0, tokens_per_s = 0;
};
struct EvalInfo {
  std::string split;                 // "val", "test"
  std::int64_t epoch = 0, step = 0;  // 1-based epoch just trained
  bool final = false;                // the test evaluation at the end of fit()
  double loss = 0, accuracy = 0;
  std::map<std::string, double> metrics;  // your metrics, by name
};
struct CheckpointInfo {
  std::int64_t step = 0;
  std::string dir;
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The model: a module and its forward. Weights are initialised by you (or by
  // model.init_from); the Trainer moves the module to the device.
  Trainer& model(std::shared_ptr<torch::nn::Module> module, ForwardFn forward);
  template <class M>
  Trainer& model(std::shared_ptr<M> module) {
    M* m = module.get();
    return model(std::static_pointer_cast<torch::nn::Module>(module),
                 [m](const torch::Tensor& x) { return m->forward(x); });
  }
  Trainer& data(data::Splits splits);
  Trainer& loss(LossFn loss);
  Trainer& metric(std::string name, MetricFn metric);
  Trainer& on_step(std::function<void(const StepInfo&)> callback);              // at every log point (train.log_every)
  Trainer& on_eval(std::function<void(const EvalInfo&)> callback);              // after each evaluation
  Trainer& on_checkpoint(std::function<void(const CheckpointInfo&)> callback);  // rank 0, after a save
  // Extra entries for the checkpoint's state.json (rank 0), e.g. what rebuilds the model.
  Trainer& checkpoint_meta(std::string key, std::string value);

  // Runs the job. Throws trainbox::Error subclasses (exit codes in util/errors.h).
  TrainSummary fit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainbox::train
