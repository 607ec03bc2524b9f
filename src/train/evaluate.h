// Evaluation of a model on a whole split (private to the trainer).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <trainbox/data/loader.h>
#include <trainbox/train/step.h>
#include <trainbox/util/heartbeat.h>

namespace trainbox::train {

struct EvalResult {
  double loss = 0;      // mean per target (per sample, or per token)
  double accuracy = 0;  // argmax of the last dimension equals the target; 0 when outputs are not class scores
  std::map<std::string, double> metrics;  // user metrics: mean per sample
  std::int64_t samples = 0, targets = 0;
};

struct EvalOptions {
  torch::Device device = torch::kCPU;
  bool amp = false;
  torch::ScalarType amp_dtype = torch::kBFloat16;
  Heartbeat* heartbeat = nullptr;  // phase "eval" per batch (a long evaluation is not a stall); null: none
};

EvalResult evaluate(torch::nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                    const std::vector<std::pair<std::string, MetricFn>>& metrics, data::BatchLoader& loader,
                    const EvalOptions& o);

}  // namespace trainbox::train
