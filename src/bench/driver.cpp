#include <trainbox/bench/bench.h>

#include <chrono>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/util/cpu_features.h>
#include <trainbox/util/clock.h>
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
    s.push_back(seconds_since(t0));
  }
  return summarize(s);
}

std::vector<std::int64_t> sizes_or(const BenchOptions& o, std::vector<std::int64_t> quick,
                                   std::vector<std::int64_t> full) {
  if (!o.sizes.empty()) return o.sizes;
  return o.quick ? std::move(quick) : std::move(full);
}

std::string emulated_reason(const std::string& dtype, const torch::Device& device) {
  if (device.is_cuda() || (dtype != "bf16" && dtype != "fp16")) return "";
  const CpuFeatures cpu = cpu_features();
  if (!cpu.known()) return "";
  if (dtype == "bf16" && !cpu.native_bf16())
    return fmt::format("this CPU has no native bf16 ({} absent from {})", kBf16FlagNames, cpu.source);
  if (dtype == "fp16" && !cpu.native_fp16())
    return fmt::format("this CPU has no native fp16 (avx512_fp16 or amx_fp16 absent from {})", cpu.source);
  return "";
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
