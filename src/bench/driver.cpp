#include <trainbox/bench/bench.h>

#include <chrono>

#include <fmt/format.h>
#include <torch/torch.h>
#ifdef TRAINBOX_WITH_CUDA
#include "cuda_timer.h"
#endif

namespace trainbox::bench {

Stats time_op(const std::function<void()>& fn, const torch::Device& device, int warmup, int iters) {
#ifdef TRAINBOX_WITH_CUDA
  if (device.is_cuda()) return time_op_cuda(fn, device, warmup, iters);
#endif
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> s;
  s.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return summarize(s);
}

std::vector<std::int64_t> sizes_or(const BenchOptions& o, std::vector<std::int64_t> quick,
                                   std::vector<std::int64_t> full) {
  if (!o.sizes.empty()) return o.sizes;
  return o.quick ? std::move(quick) : std::move(full);
}

void describe_run(BenchReport& r, const torch::Device& device) {
  r.header("torch", TORCH_VERSION);
  r.header("device", device.is_cuda()
                         ? fmt::format("{} ({})", device.str(), torch::cuda::device_count() > 0 ? "CUDA" : "?")
                         : fmt::format("cpu, {} threads", at::get_num_threads()));
#ifdef TRAINBOX_WITH_CUDA
  if (device.is_cuda()) r.header("gpu", describe_gpu(device));
#endif
}

}  // namespace trainbox::bench
