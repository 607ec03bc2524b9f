#include <trainbox/bench/bench.h>

#include <chrono>

#include <fmt/format.h>
#include <torch/torch.h>
#ifdef TRAINBOX_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainbox::bench {

Stats time_op(const std::function<void()>& fn, const torch::Device& device, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> s;
  s.reserve(iters);
#ifdef TRAINBOX_WITH_NCCL
  if (device.is_cuda()) {
    // Device time between two events on the current stream: no host launch gaps counted
    // beyond what the GPU actually waited.
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
    for (int i = 0; i < iters; ++i) s.push_back(start[i].elapsed_time(stop[i]) / 1e3);
    return summarize(s);
  }
#endif
  (void)device;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return summarize(s);
}

void describe_run(BenchReport& r, const torch::Device& device) {
  r.header("torch", TORCH_VERSION);
  r.header("device", device.is_cuda() ? fmt::format("{} ({})", device.str(), torch::cuda::device_count() > 0 ? "CUDA" : "?")
                                      : fmt::format("cpu, {} threads", at::get_num_threads()));
#ifdef TRAINBOX_WITH_NCCL
  if (device.is_cuda()) {
    auto* p = at::cuda::getDeviceProperties(device.index());
    r.header("gpu", fmt::format("{}, CC {}.{}, {} SMs, {} MiB", p->name, p->major, p->minor, p->multiProcessorCount,
                                p->totalGlobalMem >> 20));
  }
#endif
}

}  // namespace trainbox::bench
