// trainbox/models/activation_checkpoint.h — activation checkpointing for LibTorch modules
// (torch.utils.checkpoint's reentrant form, which C++ lacks).
//
// A checkpointed unit runs its forward without keeping what autograd would save for the
// backward (the forward runs with grad off); only its input is kept. Its backward runs the
// forward again with grad on and backpropagates through that recomputation. The memory of a
// unit's activations is traded for one more forward of it (Chen et al. 2016, arXiv 1604.06174).
// The recomputation is the same computation:
//   - the RNG: the CPU generator's state (and the CUDA generator's of the input's device) is
//     taken before the forward and put back for the recomputation, so dropout draws the same
//     masks; the generators are left as the backward found them;
//   - autocast: the recomputation runs under the autocast state (enabled, dtype, per device
//     type) the forward ran under, whatever the backward runs under;
//   - buffers: the unit's buffers (BatchNorm's running statistics, num_batches_tracked) are
//     put back after the recomputation, which would otherwise update them a second time.
// On CPU, where the kernels are deterministic, the parameter gradients equal those of the
// run without checkpointing bit for bit (tests/unit/torch/test_activation_checkpoint.cpp).
// The unit's parameters are inputs of its autograd node, so their gradients reach them (and
// DDP's hooks) from the outer backward, as without checkpointing.
//
// Contract: one tensor in, one tensor out. The unit's forward must be a function of its input,
// its parameters, its buffers and the RNG (no other state that changes between the forward
// and the backward). No double backward (create_graph) through a unit. With grad off
// (evaluation, NoGradGuard) a unit is a plain call. A unit that all-reduces in its forward
// (model.sync_batchnorm) does so again in the recomputation, on every rank alike.
//
//   // a module of your own: its blocks checkpointed, its parameter names unchanged
//   torch::Tensor forward(torch::Tensor x) {
//     for (auto& block : blocks_) x = trainbox::checkpointed(block, x);   // block: a ModuleHolder
//     return head_->forward(x);
//   }
//   // or the whole module type: trainbox::Checkpointed<MyBlockImpl> is MyBlockImpl whose forward is a unit
//   blocks_.push_back(register_module("b0", std::make_shared<trainbox::Checkpointed<MyBlockImpl>>(args)));
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/models/config.h>

namespace trainbox {

using CheckpointBody = std::function<torch::Tensor(const torch::Tensor&)>;

// Runs body(x) as one checkpointed unit whose parameters and buffers are `owner`'s (all of
// them, recursively). Returns body(x)'s value; its backward recomputes body.
torch::Tensor checkpoint(torch::nn::Module& owner, CheckpointBody body, const torch::Tensor& x);

// A module's forward as a checkpointed unit: a ModuleHolder (Block), a shared_ptr or a
// reference to a module with forward(Tensor) -> Tensor.
template <class M>
torch::Tensor checkpointed(M& module, const torch::Tensor& x) {
  if constexpr (requires { module.ptr(); }) {  // a ModuleHolder
    auto* m = module.ptr().get();
    return checkpoint(
        *m, [m](const torch::Tensor& t) { return m->forward(t); }, x);
  } else if constexpr (requires { module.get(); }) {  // a shared_ptr
    auto* m = module.get();
    return checkpoint(
        *m, [m](const torch::Tensor& t) { return m->forward(t); }, x);
  } else {
    return checkpoint(
        module, [&module](const torch::Tensor& t) { return module.forward(t); }, x);
  }
}

// `Impl` (a module class, e.g. MyBlockImpl) whose forward is a checkpointed unit; parameter
// and buffer names are Impl's own, so state dicts and checkpoints are unchanged.
template <class Impl>
class Checkpointed : public Impl {
 public:
  using Impl::Impl;
  torch::Tensor forward(const torch::Tensor& x) {
    return checkpoint(
        *this, [this](const torch::Tensor& t) { return Impl::forward(t); }, x);
  }
};

namespace models {
// The built-in models' policy (model.activation_checkpointing, docs/models.md): which of the
// n blocks (GPT: transformer blocks; ResNets: residual blocks, counted over all stages) are
// checkpointed. 0: none; 1: every block ("blocks"); K: blocks K, 2K, … ("every_k" with
// model.activation_checkpointing_every = K). Throws ConfigError for another value.
std::int64_t checkpoint_every(const ModelConfig& c);
// Whether block `index` (0-based) is checkpointed under checkpoint_every() = every.
inline bool checkpoints_block(std::int64_t every, std::int64_t index) { return every > 0 && (index + 1) % every == 0; }
}  // namespace models

}  // namespace trainbox
