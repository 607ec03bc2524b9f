#include <trainbox/distributed/ddp.h>

#include <functional>
#include <unordered_set>

#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

#include "grad_compressor.h"

namespace trainbox::dist {

namespace {
// Runs after AccumulateGrad has written a parameter's gradient (into its bucket view).
struct ReadyHook : torch::autograd::PostAccumulateGradHook {
  ReadyHook(DistributedDataParallel* d, int i) : ddp(d), index(i) {}
  void operator()(const torch::autograd::Variable&) override { ddp->on_grad_ready(index); }
  DistributedDataParallel* ddp;
  int index;
};
}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> pg, DdpOptions o)
    : module_(std::move(module)), pg_(std::move(pg)), o_(o) {
  for (const auto& p : module_->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    params_.push_back(p.value());
    names_.push_back(p.key());
  }
  if (params_.empty()) throw ConfigError("DistributedDataParallel: the module has no trainable parameters");
  check_shapes();
  std::vector<torch::Tensor> state(params_.begin(), params_.end());
  for (const auto& b : module_->buffers()) state.push_back(b);
  broadcast_from_rank0(state);
  build_buckets();
  setup_compression();
  ready_.assign(params_.size(), false);
  unused_.assign(params_.size(), false);
  for (std::size_t i = 0; i < params_.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<ReadyHook>(this, int(i)));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& p : params_) torch::autograd::impl::post_acc_grad_hooks(p).reset();
}

// --- construction ---
void DistributedDataParallel::setup_compression() {
  const auto& c = o_.compression;
  if (c.method == CompressionMethod::kNone) return;
  std::vector<std::vector<std::int64_t>> shapes;
  for (const auto& p : params_) shapes.push_back(p.sizes().vec());
  check_compression_for_shapes(c, shapes);  // ConfigError: the same on every rank
  if (c.method == CompressionMethod::kPowerSgd && o_.zero_stage >= 2)
    throw ConfigError(fmt::format("dist.grad_compression = \"powersgd\" does not combine with dist.zero_stage = {} "
                                  "(P·Qᵀ and its error feedback need each rank's whole gradient, which stage 2 "
                                  "reduce-scatters)",
                                  o_.zero_stage),
                      "use dist.zero_stage = 1 with powersgd, or dist.grad_compression = \"bf16\" with stage 2");
  std::vector<GradCompressor::BucketLayout> layout;
  for (const auto& bk : buckets_) {
    GradCompressor::BucketLayout l;
    for (std::size_t k = 0; k < bk.params.size(); ++k) l.shapes.push_back(params_[bk.params[k]].sizes().vec());
    l.offsets = bk.offsets;
    layout.push_back(std::move(l));
  }
  // Below stage 2 the buckets live from step to step, and so may the 16-bit copies of them.
  compressor_ =
      std::make_unique<GradCompressor>(c, *pg_, std::move(layout), params_.front().device(), o_.zero_stage < 2);
}

std::vector<std::pair<std::string, torch::Tensor>> DistributedDataParallel::compression_state() const {
  return compressor_ ? compressor_->state() : std::vector<std::pair<std::string, torch::Tensor>>{};
}
void DistributedDataParallel::load_compression_state(const std::vector<std::pair<std::string, torch::Tensor>>& e) {
  if (compressor_) compressor_->load_state(e);
}
void DistributedDataParallel::reset_compression_state(std::int64_t iteration) {
  if (compressor_) compressor_->reset_state(iteration);
}

void DistributedDataParallel::check_shapes() {
  // Per parameter: rank, then each size; MIN and MAX across ranks differ where ranks disagree.
  const std::int64_t n = static_cast<std::int64_t>(params_.size());
  std::vector<std::int64_t> sig = {n};
  for (const auto& p : params_) {
    sig.push_back(p.dim());
    for (auto s : p.sizes()) sig.push_back(s);
  }
  // On the parameters' device: NCCL only reduces CUDA tensors.
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(params_.front().device());
  auto count = torch::tensor({n, -n}, opts);
  pg_->allreduce_op(count, c10d::ReduceOp::MAX);
  if (count[0].item<std::int64_t>() != -count[1].item<std::int64_t>())
    throw ConfigError(
        fmt::format(
            "rank {} has {} parameters but another rank has {} — the ranks built different models", pg_->rank(), n,
            count[0].item<std::int64_t>() == n ? -count[1].item<std::int64_t>() : count[0].item<std::int64_t>()),
        "give every rank the same model config");
  // Same count: compare shape signatures padded to a common length.
  auto len = torch::tensor({std::int64_t(sig.size())}, opts);
  pg_->allreduce_op(len, c10d::ReduceOp::MAX);
  sig.resize(len.item<std::int64_t>(), -7);
  auto mx = torch::tensor(sig, opts), mn = -torch::tensor(sig, opts);
  pg_->allreduce_op(mx, c10d::ReduceOp::MAX);
  pg_->allreduce_op(mn, c10d::ReduceOp::MAX);
  auto differ = (mx + mn).nonzero();
  if (differ.numel() == 0) return;
  // Map the first differing position back to its parameter.
  std::int64_t pos = differ[0][0].item<std::int64_t>(), at = 1;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    std::int64_t width = 1 + params_[i].dim();
    if (pos < at + width)
      throw ConfigError(
          fmt::format("parameter '{}' has shape {} on rank {}, but another rank's differs — the ranks built "
                      "different models",
                      names_[i], c10::str(params_[i].sizes()), pg_->rank()),
          "give every rank the same model config");
    at += width;
  }
  throw ConfigError("the ranks' parameter shapes differ", "give every rank the same model config");
}

void DistributedDataParallel::broadcast_from_rank0(std::vector<torch::Tensor> tensors) {
  torch::NoGradGuard ng;
  // Coalesced per dtype: one collective instead of one per tensor.
  std::unordered_map<int, std::vector<torch::Tensor>> by_type;
  for (auto& t : tensors) by_type[static_cast<int>(t.scalar_type())].push_back(t);
  // Chunks of at most a bucket: a model's worth of copies would double its memory at start-up
  // (stage 3 exists for models that barely fit).
  auto send = [&](std::vector<torch::Tensor>& ts) {
    if (ts.empty()) return;
    std::vector<torch::Tensor> flat_parts;
    for (auto& t : ts) flat_parts.push_back(t.reshape({-1}));
    auto flat = torch::cat(flat_parts);
    pg_->broadcast(flat, 0);
    std::int64_t off = 0;
    for (auto& t : ts) {
      t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
      off += t.numel();
    }
    ts.clear();
  };
  for (auto& [type, ts] : by_type) {
    std::vector<torch::Tensor> chunk;
    std::size_t bytes = 0;
    for (auto& t : ts) {
      if (!chunk.empty() && bytes + t.nbytes() > o_.bucket_cap_bytes) send(chunk), bytes = 0;
      chunk.push_back(t);
      bytes += t.nbytes();
    }
    send(chunk);
  }
}

void DistributedDataParallel::build_buckets() {
  if (o_.zero_stage >= 3) group_by_unit();  // zero3.cpp: one bucket per unit
  Bucket cur;
  std::size_t bytes = 0, cap = o_.first_bucket_bytes;
  auto close = [&] {
    if (cur.params.empty()) return;
    buckets_.push_back(std::move(cur));
    cur = Bucket{};
    bytes = 0;
    cap = o_.bucket_cap_bytes;
  };
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0 && o_.zero_stage < 3; --i) {
    const auto& p = params_[i];
    if (!cur.params.empty() && params_[cur.params.front()].scalar_type() != p.scalar_type()) close();
    cur.params.push_back(i);
    bytes += p.numel() * p.element_size();
    if (bytes >= cap) close();
  }
  close();
  slot_.assign(params_.size(), {-1, -1});
  torch::NoGradGuard ng;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& bk = buckets_[b];
    std::int64_t total = 0;
    for (int i : bk.params) {
      bk.offsets.push_back(total);
      total += params_[i].numel();
    }
    bk.numel = total;
    const std::int64_t n = sharded() ? pg_->size() : 1;  // sharded: every rank's slice the same size
    bk.padded = (total + n - 1) / n * n;
    if (o_.zero_stage < 2) bk.flat = torch::zeros({bk.padded}, params_[bk.params.front()].options());
    for (std::size_t k = 0; k < bk.params.size(); ++k) {
      auto& p = params_[bk.params[k]];
      if (bk.flat.defined()) p.mutable_grad() = bucket_alias(bk, k, p);  // backward accumulates into the bucket
      slot_[bk.params[k]] = {int(b), int(k)};
    }
    bk.pending = static_cast<int>(bk.params.size());
  }
  if (sharded()) setup_shards();
}

torch::Tensor DistributedDataParallel::bucket_alias(Bucket& bk, std::size_t k, const torch::Tensor& p) {
  // Shares the bucket's storage without being an autograd view: optimizers may detach_() a
  // gradient (LibTorch's zero_grad does), which is an error on a view.
  torch::NoGradGuard ng;
  auto g = torch::empty({0}, bk.flat.options());
  g.set_(bk.flat.storage(), bk.flat.storage_offset() + bk.offsets[k], p.sizes(), p.contiguous().strides());
  if (p.grad().defined()) g.copy_(p.grad());
  return g;
}

std::vector<std::vector<int>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<int>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

std::vector<DdpEvent> DistributedDataParallel::take_events() {
  std::lock_guard<std::mutex> lk(mu_);
  return std::exchange(events_, {});
}

// --- per iteration ---
void DistributedDataParallel::before_forward() {
  {
    // A backward that threw after its first hook never ran finalize_backward(): start clean.
    std::lock_guard<std::mutex> lk(mu_);
    if (callback_queued_) reset_iteration();
  }
  if (z3_) zero3_before_forward();  // stage 3: the parameters outside the units gathered
  if (o_.broadcast_buffers && pg_->size() > 1) {
    std::vector<torch::Tensor> bufs;
    for (const auto& b : module_->buffers()) bufs.push_back(b);
    if (!bufs.empty()) broadcast_from_rank0(bufs);
  }
}

void DistributedDataParallel::after_forward(const torch::Tensor& output) {
  if (!o_.find_unused_parameters) return;
  // Walk the autograd graph from the output: parameters whose accumulator is not reached
  // get no gradient this iteration and are marked ready when backward starts.
  std::unordered_set<const torch::autograd::Node*> seen;
  std::unordered_set<const void*> reached;
  std::vector<torch::autograd::Node*> stack;
  if (output.grad_fn()) stack.push_back(output.grad_fn().get());
  while (!stack.empty()) {
    auto* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(n))
      reached.insert(acc->variable.unsafeGetTensorImpl());
    for (const auto& e : n->next_edges())
      if (e.function) stack.push_back(e.function.get());
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (std::size_t i = 0; i < params_.size(); ++i) unused_[i] = !reached.count(params_[i].unsafeGetTensorImpl());
}

void DistributedDataParallel::on_grad_ready(int i) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!callback_queued_) {
    callback_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
    for (std::size_t k = 0; k < params_.size(); ++k)  // unused parameters: ready now, with zero gradients
      if (unused_[k] && !ready_[k]) {
        ready_[k] = true;
        --buckets_[slot_[k].first].pending;
      }
  }
  // A gradient that is not our bucket view (the user set .grad to None or a new tensor):
  // copy it in and restore the view.
  auto& p = params_[i];
  auto [b, k] = slot_[i];
  auto& bk = buckets_[b];
  if (!bk.flat.defined()) ensure_bucket_grads(bk);  // stages 2/3: the bucket's first gradient
  if (!p.grad().defined() ||
      p.grad().data_ptr() != static_cast<char*>(bk.flat.data_ptr()) + bk.offsets[k] * bk.flat.element_size())
    p.mutable_grad() = bucket_alias(bk, k, p);  // copies the new gradient in
  if (ready_[i]) return;                        // a parameter used twice in the graph reports once per accumulation
  ready_[i] = true;
  if (o_.record_events) events_.push_back({DdpEvent::Kind::kGradReady, i});
  if (--buckets_[b].pending == 0) {
    if (z3_) zero3_grads_done(int(b));  // stage 3: the unit's whole parameters freed
    if (!no_sync_) launch_ready_buckets();
  }
}

void DistributedDataParallel::launch_ready_buckets() {
  // Strictly in bucket order: every rank issues the same collectives in the same order.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    auto& bk = buckets_[next_launch_];
    if (!bk.flat.defined()) ensure_bucket_grads(bk);  // stages 2/3: a bucket of unused parameters
    if (compressor_)  // bf16/fp16/powersgd: the compressed collectives (grad_compressor.h); sharded: into gshard
      compressor_->launch(next_launch_, bk.flat, sharded() ? bk.gshard : no_shard_, o_.native_reduce_scatter);
    else  // sharded: a reduce-scatter into this rank's gradient slice (stage 1: in place in the bucket)
      bk.work = sharded() ? pg_->reduce_scatter_async(bk.gshard, bk.flat, /*average=*/true, o_.native_reduce_scatter)
                          : pg_->allreduce_async(bk.flat, /*average=*/true);
    if (o_.record_events) events_.push_back({DdpEvent::Kind::kLaunch, int(next_launch_)});
    ++next_launch_;
  }
  // Stages 2 and 3: the oldest launched bucket finished and its whole gradients freed while
  // backward goes on, so at most kGradBucketsInFlight of them wait whole.
  if (o_.zero_stage >= 2)
    while (next_finish_ + kGradBucketsInFlight < next_launch_) finish_bucket(next_finish_++);
}

void DistributedDataParallel::finish_bucket(std::size_t b) {
  auto& bk = buckets_[b];
  const std::string what =
      fmt::format("{}gradient allreduce of bucket {} of {}", compressor_ ? "compressed " : "", b, buckets_.size());
  try {
    if (compressor_) {
      compressor_->finish(b, bk.flat, sharded() ? bk.gshard : no_shard_, o_.native_reduce_scatter, what);
    } else {
      if (!bk.work)  // every parameter was ready, so this cannot happen unless hooks were bypassed
        throw DistError(fmt::format("rank {}: gradient bucket {} was never reduced", pg_->rank(), b));
      pg_->wait(bk.work, what);
      if (sharded())
        pg_->reduce_scatter_result(bk.gshard, bk.flat, /*average=*/true, o_.native_reduce_scatter);
      else
        pg_->finish_average(bk.flat);
      bk.work.reset();  // the work holds its buffers (the bucket, a point-to-point receive buffer)
    }
  } catch (...) {
    reset_iteration();
    throw;
  }
  if (o_.record_events) events_.push_back({DdpEvent::Kind::kFinish, int(b)});
  if (o_.zero_stage >= 2) release_bucket_grads(bk);  // its slice is in gshard now
}

void DistributedDataParallel::finalize_backward() {
  std::unique_lock<std::mutex> lk(mu_);
  if (z3_) zero3_end_backward();  // stage 3: whatever is still gathered freed
  if (no_sync_) {                 // accumulate locally; the next synchronised backward reduces the sum
    reset_iteration();
    return;
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) {
      std::string name = names_[i];
      reset_iteration();
      throw DistError(
          fmt::format("parameter '{}' received no gradient in this backward pass, so its bucket can never be "
                      "reduced",
                      name),
          "construct DistributedDataParallel with find_unused_parameters = true (dist.find_unused_parameters)");
    }
  }
  if (o_.heartbeat) o_.heartbeat->phase("allreduce");  // waiting for the other ranks' gradients
  for (std::size_t b = next_finish_; b < buckets_.size(); ++b) finish_bucket(b);
  if (compressor_) compressor_->end_step();      // the compression state kept from a finite step only
  if (o_.zero_stage >= 2) release_full_grads();  // no rank keeps the whole gradient after the step
  reset_iteration();
}

void DistributedDataParallel::reset_iteration() {
  for (auto& bk : buckets_) {
    bk.pending = static_cast<int>(bk.params.size());
    bk.work.reset();
  }
  next_finish_ = 0;
  if (compressor_) compressor_->abort_step();  // after end_step(): nothing left to drop
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
  callback_queued_ = false;
}

}  // namespace trainbox::dist
