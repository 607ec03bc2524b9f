// ZeRO stage 3 inside DistributedDataParallel (distributed/ddp.h): the parameters sharded too.
// One bucket per unit (DdpOptions::units), the parameters outside
// every unit one more bucket, last. Between uses a bucket's flat parameter storage is 0 bytes
// (as FSDP resizes its flat parameter's storage); the module's parameters stay views of it, so
// an all-gather into the re-allocated storage makes them whole again. Every write goes through
// a fresh set_() alias of the storage: the parameters' own version counters (which autograd's
// saved tensors check) never move.
//
// Per step (every rank issues the same collectives in the same order — the unit hooks and the
// gradient hooks fire in the same order on every rank):
//   before_forward(): the rest gathered (it holds the embeddings, the head: used at both ends);
//     unit 0's all-gather issued.
//   a unit's forward: wait for its all-gather (or gather it), issue the next unit's; run; free
//     (not the last unit: its backward comes first).
//   its output's gradient hook (just before its backward): gather it (prefetched by the unit
//     after it), issue the all-gather of the unit before it.
//   its gradients complete (the per-parameter hooks): free it; its reduce-scatter starts
//     (stage 2's path: bucket order, overlapped with the rest of backward).
//   the end of backward: anything still gathered freed (the rest, a unit whose backward never came).
#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/distributed/ddp.h>
#include <trainbox/util/errors.h>

namespace trainbox::dist {

struct DistributedDataParallel::Zero3 {
  enum class State { kFree, kGathering, kFull };
  explicit Zero3(DistributedDataParallel& d) : ddp(d) {}

  DistributedDataParallel& ddp;
  std::vector<std::shared_ptr<torch::nn::Module>> units;  // forward (registration) order
  std::unordered_map<const torch::nn::Module*, int> bucket_of_module;
  std::vector<int> bucket_of_unit;  // unit → bucket
  std::vector<int> unit_of_bucket;  // bucket → unit, -1: the rest
  std::vector<State> state;
  std::vector<bool> pinned;  // gather_parameters()
  std::vector<c10::intrusive_ptr<c10d::Work>> work;
  std::vector<torch::Tensor> out;  // the all-gather's output alias while it is in flight
  std::int64_t gathered = 0, peak = 0;

  std::string what(int b) const {
    return unit_of_bucket[b] < 0 ? std::string("the parameters outside the units")
                                 : fmt::format("unit {} of {}", unit_of_bucket[b], units.size());
  }

  // record_events: the forward and the backward hooks run on one thread per device, and
  // on_grad_ready calls release() holding the DDP's mutex, so no lock here.
  void note(DdpEvent::Kind k, int b) {
    if (ddp.o_.record_events) ddp.events_.push_back({k, b});
  }

  // --- one bucket's whole parameters: allocate + all-gather, wait, free ---
  void gather_async(int b) {
    if (state[b] != State::kFree) return;
    auto& bk = ddp.buckets_[b];
    auto* impl = bk.pflat.storage().unsafeGetStorageImpl();
    const std::size_t nbytes = static_cast<std::size_t>(bk.padded) * bk.pflat.element_size();
    impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
    impl->set_nbytes(nbytes);
    gathered += static_cast<std::int64_t>(nbytes);
    peak = std::max(peak, gathered);
    torch::NoGradGuard ng;
    out[b] = torch::empty({0}, bk.pflat.options());  // a fresh alias: its own version counter
    out[b].set_(bk.pflat.storage(), 0, {bk.padded}, {1});
    work[b] = ddp.pg_->allgather_async(out[b], bk.pshard);
    state[b] = State::kGathering;
    note(DdpEvent::Kind::kGather, b);
  }
  void wait(int b) {
    if (state[b] != State::kGathering) return;
    auto w = std::exchange(work[b], {});
    state[b] = State::kFull;  // (a failed wait throws: the storage stays allocated, the step fails)
    ddp.pg_->wait(w, "parameter all-gather of " + what(b));
    out[b].reset();
  }
  void gather(int b) {
    gather_async(b);
    wait(b);
  }
  void release(int b) {
    if (pinned[b] || state[b] == State::kFree) return;
    wait(b);
    auto& bk = ddp.buckets_[b];
    auto* impl = bk.pflat.storage().unsafeGetStorageImpl();
    gathered -= static_cast<std::int64_t>(impl->nbytes());
    impl->set_data_ptr_noswap(at::DataPtr(nullptr, bk.pflat.device()));
    impl->set_nbytes(0);
    state[b] = State::kFree;
    note(DdpEvent::Kind::kRelease, b);
  }

  // --- around the units' forwards (DDP::before_unit / after_unit) ---
  int bucket_of(const torch::nn::Module& m) const {
    auto it = bucket_of_module.find(&m);
    return it == bucket_of_module.end() ? -1 : it->second;
  }
  void before_unit(const torch::nn::Module& m) {
    const int b = bucket_of(m);
    if (b < 0) return;
    gather(b);
    const int u = unit_of_bucket[b];  // prefetch the next unit in forward order
    if (u + 1 < static_cast<int>(units.size())) gather_async(bucket_of_unit[u + 1]);
  }
  torch::Tensor after_unit(const torch::nn::Module& m, const torch::Tensor& y) {
    const int b = bucket_of(m);
    if (b < 0) return y;
    note(DdpEvent::Kind::kUnitEnd, b);
    const bool backward_comes = torch::GradMode::is_enabled() && y.requires_grad();
    // The last unit's backward is the first to come: it stays whole (one all-gather saved).
    if (!backward_comes || unit_of_bucket[b] + 1 < static_cast<int>(units.size())) release(b);
    if (backward_comes)  // fires just before the unit's backward
      y.register_hook([this, b](const torch::Tensor&) { before_backward(b); });
    return y;
  }
  void before_backward(int b) {
    gather(b);
    const int u = unit_of_bucket[b];  // prefetch the unit before it: backward's next
    if (u > 0) gather_async(bucket_of_unit[u - 1]);
  }
  void release_all() {
    for (std::size_t b = 0; b < state.size(); ++b) wait(int(b));  // no collective left in flight
    for (std::size_t b = 0; b < state.size(); ++b) release(int(b));
  }
};

// --- construction ---
void DistributedDataParallel::group_by_unit() {
  z3_ = std::make_shared<Zero3>(*this);
  auto& z = *z3_;
  // The units in forward order (another order only costs the prefetch its head start).
  z.units = o_.units;
  std::unordered_map<const void*, int> owner;  // parameter → unit (the first unit that holds it)
  for (std::size_t u = 0; u < z.units.size(); ++u)
    for (const auto& p : z.units[u]->parameters()) owner.emplace(p.unsafeGetTensorImpl(), int(u));
  std::vector<std::vector<int>> members(z.units.size() + 1);         // the last: the rest
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {  // reverse order, as every bucket
    auto it = owner.find(params_[i].unsafeGetTensorImpl());
    members[it == owner.end() ? z.units.size() : std::size_t(it->second)].push_back(i);
  }
  std::vector<std::shared_ptr<torch::nn::Module>> kept;  // units with trainable parameters
  auto add = [&](const std::vector<int>& ps, int unit) {
    for (int i : ps)
      if (params_[i].scalar_type() != params_[ps.front()].scalar_type())
        throw ConfigError(fmt::format("dist.zero_stage = 3: unit parameters '{}' and '{}' differ in dtype",
                                      names_[ps.front()], names_[i]),
                          "give every parameter of a unit one dtype, or use dist.zero_stage = 2");
    Bucket bk;
    bk.params = ps;
    buckets_.push_back(std::move(bk));
    z.unit_of_bucket.push_back(unit);
  };
  std::vector<int> unit_bucket(z.units.size(), -1);
  for (int u = static_cast<int>(z.units.size()) - 1; u >= 0; --u)  // bucket 0: the last unit (backward's first)
    if (!members[u].empty()) {
      unit_bucket[u] = static_cast<int>(buckets_.size());
      add(members[u], u);
    }
  if (!members.back().empty()) add(members.back(), -1);
  // Renumber the units that hold parameters, forward order.
  for (std::size_t u = 0; u < z.units.size(); ++u)
    if (unit_bucket[u] >= 0) {
      z.unit_of_bucket[unit_bucket[u]] = static_cast<int>(kept.size());
      z.bucket_of_unit.push_back(unit_bucket[u]);
      z.bucket_of_module[z.units[u].get()] = unit_bucket[u];
      kept.push_back(z.units[u]);
    }
  z.units = std::move(kept);
  const std::size_t n = buckets_.size();
  z.state.assign(n, Zero3::State::kFull);  // setup_zero3() frees them
  z.pinned.assign(n, false);
  z.work.resize(n);
  z.out.resize(n);
}

void DistributedDataParallel::setup_zero3(int b) {
  auto& z = *z3_;
  z.gathered += static_cast<std::int64_t>(buckets_[b].pflat.storage().nbytes());
  z.release(b);
  z.peak = 0;
}

void DistributedDataParallel::before_unit(const torch::nn::Module& unit) {
  if (z3_) z3_->before_unit(unit);
}
torch::Tensor DistributedDataParallel::after_unit(const torch::nn::Module& unit, const torch::Tensor& y) {
  return z3_ ? z3_->after_unit(unit, y) : y;
}

// --- per step ---
void DistributedDataParallel::zero3_before_forward() {
  auto& z = *z3_;
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    if (z.unit_of_bucket[b] < 0) z.gather(int(b));  // the rest: held through forward and backward
  if (!z.bucket_of_unit.empty()) z.gather_async(z.bucket_of_unit.front());
}

void DistributedDataParallel::zero3_grads_done(int bucket) { z3_->release(bucket); }

void DistributedDataParallel::zero3_end_backward() { z3_->release_all(); }

void DistributedDataParallel::zero3_after_step() {
  auto& z = *z3_;
  // Only what gather_parameters() holds needs the update; everything else is gathered at its use.
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    if (z.pinned[b]) {
      z.pinned[b] = false;
      z.release(int(b));
      z.gather_async(int(b));
      z.pinned[b] = true;
    }
  for (std::size_t b = 0; b < buckets_.size(); ++b) z.wait(int(b));
}

void DistributedDataParallel::gather_parameters() {
  if (!z3_) return;
  auto& z = *z3_;
  for (std::size_t b = 0; b < buckets_.size(); ++b) z.gather_async(int(b));
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    z.wait(int(b));
    z.pinned[b] = true;
  }
}

void DistributedDataParallel::gather_outside_units() {
  if (!z3_) return;
  auto& z = *z3_;
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    if (z.unit_of_bucket[b] < 0) {
      z.gather(int(b));
      z.pinned[b] = true;
    }
}

void DistributedDataParallel::release_parameters() {
  if (!z3_) return;
  auto& z = *z3_;
  std::fill(z.pinned.begin(), z.pinned.end(), false);
  z.release_all();
}

std::size_t DistributedDataParallel::unit_count() const { return z3_ ? z3_->units.size() : 0; }

void DistributedDataParallel::reset_gathered_peak() {
  if (z3_) z3_->peak = z3_->gathered;
}

ModelStateBytes DistributedDataParallel::zero3_model_state(const std::vector<torch::Tensor>& grads,
                                                           const std::vector<torch::Tensor>& optimizer_state) const {
  // The steady state: the shards (their own storage). The whole parameters gathered for a
  // unit's forward or backward are transient: the largest amount held at once is gathered_peak.
  std::vector<torch::Tensor> shards;
  for (const auto& bk : buckets_) shards.push_back(bk.pshard);
  ModelStateBytes b = count_model_state(shards, grads, optimizer_state);
  b.gathered_peak = z3_->peak;
  return b;
}

}  // namespace trainbox::dist
