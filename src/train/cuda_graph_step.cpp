#include "cuda_graph_step.h"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

namespace trainbox::train {

namespace {

// Work queued on `waiter` after this call starts only when `waited`'s work so far is done.
void wait_stream(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& waited) {
  at::cuda::CUDAEvent ev;
  ev.record(waited);
  ev.block(waiter);
}

// Autocast's cast cache off for a scope, then back to what it was.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : prev_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(prev_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool prev_;
};

constexpr int kWarmupSteps = 3;  // torch.cuda.graphs' advice: a few eager iterations on the side stream

}  // namespace

struct CudaGraphStep::Impl {
  torch::Device device;
  GraphStepHooks hooks;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor x, y, loss;  // static inputs and output of the captured step

  void capture(const torch::Tensor& x0, const torch::Tensor& y0) {
    x = x0.clone();
    y = y0.clone();
    auto main = c10::cuda::getCurrentCUDAStream(device.index());
    auto side = c10::cuda::getStreamFromPool(false, device.index());
    hooks.save();
    wait_stream(side, main);
    {
      c10::cuda::CUDAStreamGuard sg(side);
      for (int i = 0; i < kWarmupSteps; ++i) hooks.step(x, y);
    }
    wait_stream(main, side);
    hooks.restore();
    wait_stream(side, main);  // the restore's copies land before the capture's first read
    AutocastCacheOff cache_off;
    graph = std::make_unique<at::cuda::CUDAGraph>();
    {
      c10::cuda::CUDAStreamGuard sg(side);
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        loss = hooks.step(x, y);
      } catch (...) {
        try {
          graph->capture_end();
        } catch (...) {
        }
        graph.reset();
        throw;
      }
      graph->capture_end();
    }
    wait_stream(main, side);
  }
};

CudaGraphStep::CudaGraphStep(torch::Device device, GraphStepHooks hooks)
    : impl_(std::make_unique<Impl>(Impl{device, std::move(hooks), nullptr, {}, {}, {}})) {
  if (!device.is_cuda() || !device.has_index())
    throw SystemError(fmt::format("CUDA graphs need a CUDA device with an index, not {}", device.str()));
}

CudaGraphStep::~CudaGraphStep() = default;

torch::Tensor CudaGraphStep::operator()(const torch::Tensor& x, const torch::Tensor& y) {
  c10::cuda::CUDAGuard guard(impl_->device.index());
  if (!impl_->graph) {
    impl_->capture(x, y);
  } else if (!x.sizes().equals(impl_->x.sizes()) || !y.sizes().equals(impl_->y.sizes())) {
    throw SystemError(fmt::format("a CUDA graph captured for batches of shape {} got a batch of shape {}",
                                  c10::str(impl_->x.sizes()), c10::str(x.sizes())),
                      "graph mode needs equal batches: keep the loader's drop_last (the trainer sets it)");
  }
  impl_->x.copy_(x, /*non_blocking=*/true);
  impl_->y.copy_(y, true);
  impl_->graph->replay();
  return impl_->loss.clone();
}

}  // namespace trainbox::train
