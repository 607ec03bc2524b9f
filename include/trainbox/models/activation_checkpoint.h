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
//   - dropout through trainbox::dropout (below; the built-in GPT's) on CPU is not drawn again:
//     the forward keeps its mask (1 byte an element) and the recomputation reuses it;
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
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/models/config.h>

namespace trainbox {

using CheckpointBody = std::function<torch::Tensor(const torch::Tensor&)>;

// Runs body(x) as one checkpointed unit whose parameters and buffers are `owner`'s (all of
// them, recursively). Returns body(x)'s value; its backward recomputes body.
torch::Tensor checkpoint(torch::nn::Module& owner, CheckpointBody body, const torch::Tensor& x);

// Dropout whose mask a checkpointed unit's recomputation reuses: torch::dropout(x, p,
// training), the same values from the same RNG, but on CPU inside a checkpointed unit the
// forward keeps the mask (bool, 1 byte an element, and the CPU generator's state after the
// draw) and the recomputation takes it back instead of drawing it again. Drawing a mask on CPU
// (bernoulli_, about 9 ns an element on one thread) can cost as much as the rest of a
// transformer block's forward. On CUDA, and outside a checkpointed unit, it is torch::dropout
// (the generator put back for the recomputation draws the same mask there). Throws
// std::logic_error when a recomputation asks for masks the forward did not draw (a unit whose
// forward is not a function of its input, parameters, buffers and RNG: see the contract).
torch::Tensor dropout(const torch::Tensor& x, double p, bool training);
// Whether trainbox::dropout keeps or replays CPU masks on this thread now: inside a
// checkpointed unit's forward or recomputation whose input is on CPU. (The GPT's attention
// takes its written-out math path there, so its mask is kept too: models/attention.h.)
bool keeps_dropout_masks();

// --- units: the one way a module is marked as a piece of the model's forward ---
// A unit is a module whose forward runs as one piece: the piece activation checkpointing
// recomputes, and the piece ZeRO stage 3 (distributed/ddp.h, dist.zero_stage = 3) gathers
// whole before its forward and its backward and frees after. The built-in models mark theirs
// (the GPT: each transformer block; the ResNets: each stage, layer1…layer4); a Trainer API
// user marks a module once it is registered and runs its forward through unit():
//   blocks_.push_back(register_module("b0", MyBlock(args)));  trainbox::mark_unit(*blocks_.back());
//   for (auto& b : blocks_) x = trainbox::unit(b, x);   // or trainbox::checkpointed(b, x): recomputed too
// A unit's parameters are its own (recursively) and must not be used outside its forward. Units
// do not nest (the outermost marked module is the unit). A module that is not marked runs as
// a plain call through unit() (and checkpointed() checkpoints it, as it always has).

// Marks `m` as a unit. It must be owned by a shared_ptr (every registered submodule is, and
// so is every ModuleHolder's module). Throws ConfigError otherwise.
void mark_unit(torch::nn::Module& m);
bool is_unit(const torch::nn::Module& m);
// The units of `root`: the outermost marked modules (root itself if marked), registration order.
std::vector<std::shared_ptr<torch::nn::Module>> find_units(const std::shared_ptr<torch::nn::Module>& root);

// What runs around each of `units`' forwards while this lives (ZeRO stage 3's gathering: the
// DDP's before_unit / after_unit; train/ wires them, distributed/ does not depend on models/).
class UnitHooksScope {
 public:
  using Before = std::function<void(const torch::nn::Module&)>;
  using After = std::function<torch::Tensor(const torch::nn::Module&, const torch::Tensor&)>;  // returns the output
  UnitHooksScope(std::vector<std::shared_ptr<torch::nn::Module>> units, Before before, After after);
  ~UnitHooksScope();
  UnitHooksScope(const UnitHooksScope&) = delete;
  UnitHooksScope& operator=(const UnitHooksScope&) = delete;
  void before(const torch::nn::Module& m) const { before_(m); }
  torch::Tensor after(const torch::nn::Module& m, const torch::Tensor& y) const { return after_(m, y); }

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> units_;
  Before before_;
  After after_;
};
// Runs body(x) as `owner`'s unit: its hooks around it, and checkpointed when `recompute`.
torch::Tensor run_unit(torch::nn::Module& owner, CheckpointBody body, const torch::Tensor& x, bool recompute);

// A module's forward as a unit, checkpointed when `recompute`: a ModuleHolder (Block), a
// shared_ptr or a reference to a module with forward(Tensor) -> Tensor.
template <class M>
torch::Tensor unit(M& module, const torch::Tensor& x, bool recompute = false) {
  if constexpr (requires { module.ptr(); }) {  // a ModuleHolder
    auto* m = module.ptr().get();
    return run_unit(
        *m, [m](const torch::Tensor& t) { return m->forward(t); }, x, recompute);
  } else if constexpr (requires { module.get(); }) {  // a shared_ptr
    auto* m = module.get();
    return run_unit(
        *m, [m](const torch::Tensor& t) { return m->forward(t); }, x, recompute);
  } else {
    return run_unit(
        module, [&module](const torch::Tensor& t) { return module.forward(t); }, x, recompute);
  }
}

// A module's forward as a checkpointed unit: a ModuleHolder (Block), a shared_ptr or a
// reference to a module with forward(Tensor) -> Tensor.
template <class M>
torch::Tensor checkpointed(M& module, const torch::Tensor& x) {
  return unit(module, x, /*recompute=*/true);
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
