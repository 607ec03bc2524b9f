// trainbox/train/amp.h — mixed precision from C++: an autocast scope and a GradScaler.
//
// LibTorch has autocast but no RAII scope for it and no GradScaler. AutocastGuard turns
// autocast on for one device type and dtype and restores the previous state on exit.
// GradScaler is PyTorch's dynamic loss scaling for fp16: multiply the loss by `scale`,
// unscale the gradients before the optimizer, skip steps whose gradients hold inf/NaN
// and halve the scale; after `growth_interval` clean steps in a row, double it. Built on
// the same ATen kernels torch.amp.GradScaler uses (_amp_foreach_non_finite_check_and_
// unscale_, _amp_update_scale_), on CUDA and CPU.
//
//   GradScaler scaler;                                   // fp16 on CUDA
//   { AutocastGuard ac(torch::kCUDA, torch::kHalf); loss = loss_fn(model(x), y); }
//   scaler.scale(loss).backward();
//   scaler.unscale(params);                              // optional: before clipping
//   bool stepped = scaler.step(params, [&] { opt.step(); });
//   scaler.update();
// One GradScaler per optimizer; call scale/unscale/step/update once each per step, in order.
// train::autocast_enabled / autocast_dtype turn the config's train.amp (train/config.h) into
// an AutocastGuard's arguments.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/types.h>

#include <trainbox/train/config.h>

namespace trainbox {

class AutocastGuard {
 public:
  AutocastGuard(torch::DeviceType device, torch::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType device_;
  bool enabled_, prev_enabled_;
  torch::ScalarType prev_dtype_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, as torch.amp.GradScaler
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: every call is a pass-through
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});

  torch::Tensor scale(const torch::Tensor& loss);
  // Divides the gradients of `params` by the scale in place and records whether any is
  // inf/NaN. Idempotent within a step.
  void unscale(const std::vector<torch::Tensor>& params);
  // Unscales if not done yet; runs `optimizer_step` only if every gradient is finite.
  bool step(const std::vector<torch::Tensor>& params, const std::function<void()>& optimizer_step);
  // Backs off after an inf/NaN step, grows after growth_interval clean steps.
  void update();

  double get_scale() const;
  std::int64_t growth_tracker() const;
  bool enabled() const { return opts_.enabled; }
  // Sharded training: each rank unscales only its shard of the gradients, so found_inf is
  // combined over the ranks (MAX) before the skip decision; `f` does that in place.
  void set_found_inf_sync(std::function<void(torch::Tensor&)> f) { found_inf_sync_ = std::move(f); }
  // For checkpoints: {scale, growth_tracker}.
  std::vector<double> state() const;
  void load_state(const std::vector<double>& s);

 private:
  void lazy_init(const torch::Device& d);
  GradScalerOptions opts_;
  torch::Tensor scale_, growth_tracker_, found_inf_;
  bool unscaled_ = false;
  std::function<void(torch::Tensor&)> found_inf_sync_;
};

namespace train {
// train.amp as autocast takes it: on unless Amp::kOff; float16 for Amp::kFp16, else bfloat16.
inline bool autocast_enabled(Amp a) { return a != Amp::kOff; }
inline torch::ScalarType autocast_dtype(Amp a) { return a == Amp::kFp16 ? torch::kHalf : torch::kBFloat16; }
}  // namespace train

}  // namespace trainbox
