#include <trainbox/train/amp.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace trainbox {

AutocastGuard::AutocastGuard(torch::DeviceType device, torch::ScalarType dtype, bool enabled)
    : device_(device), enabled_(enabled) {
  if (!enabled_) return;
  prev_enabled_ = at::autocast::is_autocast_enabled(device_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  // Leaving the outermost scope drops the cast-weight cache, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
}

GradScaler::GradScaler(GradScalerOptions o) : opts_(o) {}

void GradScaler::lazy_init(const torch::Device& d) {
  if (scale_.defined()) {
    if (scale_.device() != d) {
      scale_ = scale_.to(d);
      growth_tracker_ = growth_tracker_.to(d);
    }
    return;
  }
  scale_ = torch::full({1}, opts_.init_scale, torch::TensorOptions().dtype(torch::kFloat32).device(d));
  growth_tracker_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt32).device(d));
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  if (!opts_.enabled) return loss;
  lazy_init(loss.device());
  return loss * scale_.to(loss.scalar_type());
}

void GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  if (!opts_.enabled || unscaled_) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  lazy_init(grads.front().device());
  found_inf_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat32).device(scale_.device()));
  auto inv_scale = scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
  // The kernel wants all tensors on one device; trainbox trains one device per process.
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  if (found_inf_sync_) found_inf_sync_(found_inf_);  // every shard decides the skip together
  unscaled_ = true;
}

bool GradScaler::step(const std::vector<torch::Tensor>& params, const std::function<void()>& optimizer_step) {
  if (!opts_.enabled) {
    optimizer_step();
    return true;
  }
  unscale(params);
  // One host sync per step, as in PyTorch: the skip decision is made on the host.
  bool finite = !found_inf_.defined() || found_inf_.item<float>() == 0.0f;
  if (finite) optimizer_step();
  return finite;
}

void GradScaler::update() {
  if (!opts_.enabled || !scale_.defined()) return;
  if (!found_inf_.defined()) found_inf_ = torch::zeros({1}, scale_.options());
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, opts_.growth_factor, opts_.backoff_factor,
                         opts_.growth_interval);
  found_inf_ = torch::Tensor();
  unscaled_ = false;
}

double GradScaler::get_scale() const { return scale_.defined() ? scale_.item<double>() : opts_.init_scale; }
std::int64_t GradScaler::growth_tracker() const { return growth_tracker_.defined() ? growth_tracker_.item<int>() : 0; }

std::vector<double> GradScaler::state() const { return {get_scale(), double(growth_tracker())}; }

void GradScaler::load_state(const std::vector<double>& s) {
  if (s.size() != 2) return;
  auto dev = scale_.defined() ? scale_.device() : torch::Device(torch::kCPU);
  scale_ = torch::full({1}, s[0], torch::TensorOptions().dtype(torch::kFloat32).device(dev));
  growth_tracker_ = torch::full({1}, std::int64_t(s[1]), torch::TensorOptions().dtype(torch::kInt32).device(dev));
}

}  // namespace trainbox
