// src/train/cuda_graph_step.h — one whole training step (forward, backward, optimizer) as a
// CUDA graph: captured once, replayed per batch. Private to the trainer; compiled only into
// CUDA builds (TRAINBOX_WITH_CUDA).
//
// Capture, as torch.cuda.graphs recommends: three warm-up steps on a side stream (allocator
// pools, cuBLAS workspaces, lazy state), then the capture on that stream. The warm-up steps
// are real updates on batch 0 that an eager run never does, so `save` is called before them
// and `restore` after: a graph run trains exactly the steps an eager run does. Everything the
// step reads on the host is frozen at capture (the optimizer's bound_step() contract); the
// learning rate lives in a tensor, so schedules keep working.
//
// Capture uses cudaStreamCaptureModeThreadLocal: the loader's prefetch thread may allocate
// pinned memory (cudaHostAlloc) while this thread captures, which the global mode forbids.
// The autocast weight cache is off during the capture (a cached cast must not outlive it) and
// put back as it was afterwards.
//
//   CudaGraphStep g(dev, {.step = [&](auto& x, auto& y) { … return loss.detach(); },
//                         .save = [&] { snap = …; }, .restore = [&] { …; }});
//   torch::Tensor loss = g(batch.x, batch.y);   // first call captures, later calls replay
#pragma once
#include <functional>
#include <memory>

#include <torch/types.h>

namespace trainbox::train {

struct GraphStepHooks {
  std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& y)> step;  // returns the loss
  std::function<void()> save, restore;                                                // around the warm-up steps
};

class CudaGraphStep {
 public:
  CudaGraphStep(torch::Device device, GraphStepHooks hooks);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // Copies x, y into the graph's static inputs and replays (capturing first on the first
  // call). Every batch must have the first batch's shape (the loader drops the last partial
  // batch in graph mode). Returns a copy of the step's loss.
  torch::Tensor operator()(const torch::Tensor& x, const torch::Tensor& y);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainbox::train
