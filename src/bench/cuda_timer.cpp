#include "cuda_timer.h"

#include <vector>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>
#include <torch/torch.h>

namespace trainbox::bench {

Stats time_op_cuda(const std::function<void()>& fn, const torch::Device& device, int warmup, int iters) {
  c10::cuda::CUDAGuard guard(device.index());
  for (int i = 0; i < warmup; ++i) fn();
  torch::cuda::synchronize(device.index());
  std::vector<at::cuda::CUDAEvent> start, stop;  // timing events (the default flag disables timing)
  start.reserve(iters);
  stop.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    start.emplace_back(cudaEventDefault);
    stop.emplace_back(cudaEventDefault);
  }
  for (int i = 0; i < iters; ++i) {
    start[i].record();
    fn();
    stop[i].record();
  }
  torch::cuda::synchronize(device.index());
  std::vector<double> s;
  s.reserve(iters);
  for (int i = 0; i < iters; ++i) s.push_back(start[i].elapsed_time(stop[i]) / 1e3);
  return summarize(s);
}

std::string describe_gpu(const torch::Device& device) {
  auto* p = at::cuda::getDeviceProperties(device.index());
  return fmt::format("{}, CC {}.{}, {} SMs, {} MiB", p->name, p->major, p->minor, p->multiProcessorCount,
                     p->totalGlobalMem >> 20);
}

}  // namespace trainbox::bench
