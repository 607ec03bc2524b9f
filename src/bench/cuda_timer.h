// src/bench/cuda_timer.h — the bench driver's CUDA half (compiled into CUDA builds only,
// TRAINBOX_WITH_CUDA): device-side timing with CUDA events, and the GPU's description.
#pragma once
#include <functional>
#include <string>

#include <torch/types.h>

#include <trainbox/bench/report.h>

namespace trainbox::bench {

// Runs fn `warmup` times, then `iters` times, each between two timing events recorded on
// `device`'s current stream (device time: host launch gaps count only where the GPU waited).
// Makes `device` current for the duration, so cuda:N times GPU N's stream, never GPU 0's.
Stats time_op_cuda(const std::function<void()>& fn, const torch::Device& device, int warmup, int iters);

// "NVIDIA H200, CC 9.0, 132 SMs, 143771 MiB"
std::string describe_gpu(const torch::Device& device);

}  // namespace trainbox::bench
