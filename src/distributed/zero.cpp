// ZeRO stages 1 and 2 inside DistributedDataParallel (distributed/ddp.h): flat parameters
// per bucket, this rank's shards for the optimizer, the all-gather after its step, stage 2's
// gradient buckets released and re-allocated, and the model-state accounting.
#include <unordered_set>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/distributed/ddp.h>
#include <trainbox/util/errors.h>

namespace trainbox::dist {

namespace {
// A tensor sharing `base`'s storage at [offset, offset + n) without being an autograd view
// (as the gradient aliases are: optimizers may detach_() or set .grad on it).
torch::Tensor alias(const torch::Tensor& base, std::int64_t offset, std::int64_t n) {
  torch::NoGradGuard ng;
  auto t = torch::empty({0}, base.options());
  t.set_(base.storage(), base.storage_offset() + offset, {n}, {1});
  return t;
}
}  // namespace

std::int64_t DistributedDataParallel::shard_begin(const Bucket& bk) const {
  return pg_->rank() * (bk.padded / pg_->size());
}

void DistributedDataParallel::setup_shards() {
  if (o_.zero_stage > 3)
    throw ConfigError(fmt::format("dist.zero_stage = {} is not a ZeRO stage", o_.zero_stage), "use 0, 1, 2 or 3");
  torch::NoGradGuard ng;
  for (auto& bk : buckets_) {
    const auto& first = params_[bk.params.front()];
    bk.pflat = torch::zeros({bk.padded}, first.options());  // the padding stays zero: its gradient is zero
    for (std::size_t k = 0; k < bk.params.size(); ++k) {
      auto& p = params_[bk.params[k]];
      auto view = bk.pflat.narrow(0, bk.offsets[k], p.numel());
      view.copy_(p.detach().reshape({-1}));
      p.set_data(view.view(p.sizes()));  // the module's parameter now lives in the flat bucket
    }
    const std::int64_t size = bk.padded / pg_->size(), begin = shard_begin(bk);
    // Stage 3: the shard in its own storage (the flat bucket's is freed between uses).
    bk.pshard = o_.zero_stage >= 3 ? bk.pflat.narrow(0, begin, size).clone() : alias(bk.pflat, begin, size);
    // Stage 1: the bucket's own slice, reduce-scattered in place; stage 2: the reduce-scatter's output.
    bk.gshard = o_.zero_stage >= 2 ? torch::zeros({size}, first.options()) : alias(bk.flat, begin, size);
    bk.pshard.mutable_grad() = bk.gshard;
    if (o_.zero_stage >= 3) setup_zero3(static_cast<int>(&bk - buckets_.data()));  // one whole bucket at a time
  }
}

std::vector<torch::Tensor> DistributedDataParallel::optimizer_params() const {
  if (!sharded()) return params_;
  std::vector<torch::Tensor> out;
  for (const auto& bk : buckets_) out.push_back(bk.pshard);
  return out;
}

void DistributedDataParallel::ensure_bucket_grads(Bucket& bk) {
  torch::NoGradGuard ng;
  bk.flat = torch::zeros({bk.padded}, bk.gshard.options());
  for (std::size_t k = 0; k < bk.params.size(); ++k) {
    auto& p = params_[bk.params[k]];
    p.mutable_grad() = bucket_alias(bk, k, p);  // a gradient autograd already wrote is copied in
  }
}

void DistributedDataParallel::release_bucket_grads(Bucket& bk) {
  for (int i : bk.params) params_[i].mutable_grad().reset();
  bk.flat = torch::Tensor();  // the last reference: the storage goes back to the allocator
}

void DistributedDataParallel::release_full_grads() {
  for (auto& bk : buckets_) release_bucket_grads(bk);
}

void DistributedDataParallel::after_step() {
  if (!sharded()) return;
  if (z3_) return zero3_after_step();  // stage 3: the shards are the weights
  // (A world of 1 runs the same collectives: the NCCL path is then checked on one GPU.)
  torch::NoGradGuard ng;
  if (o_.zero_stage == 1)
    for (auto& bk : buckets_) bk.flat.zero_();  // the optimizer zeroed only its own slice
  // One all-gather per bucket, all in flight at once, in place (the input is the output's own slice).
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& bk : buckets_) works.push_back(pg_->allgather_async(bk.pflat, bk.pshard));
  for (std::size_t b = 0; b < works.size(); ++b)
    pg_->wait(works[b], fmt::format("parameter all-gather of bucket {} of {}", b, works.size()));
}

void DistributedDataParallel::allreduce_sum(torch::Tensor& t) {
  if (pg_->size() > 1) pg_->allreduce_op(t, c10d::ReduceOp::SUM);
}
int DistributedDataParallel::world_size() const { return pg_->size(); }
void DistributedDataParallel::allreduce_max(torch::Tensor& t) {
  if (pg_->size() > 1) pg_->allreduce_op(t, c10d::ReduceOp::MAX);
}

std::vector<DistributedDataParallel::BucketShard> DistributedDataParallel::shard_layout() const {
  std::vector<BucketShard> out;
  for (const auto& bk : buckets_) {
    const std::int64_t n = sharded() ? pg_->size() : 1;
    out.push_back({bk.params, bk.offsets, bk.numel, bk.padded, sharded() ? shard_begin(bk) : 0, bk.padded / n});
  }
  return out;
}

std::int64_t DistributedDataParallel::padding_elements() const {
  std::int64_t pad = 0;
  for (const auto& bk : buckets_) pad += bk.padded - bk.numel;
  return pad;
}

ModelStateBytes DistributedDataParallel::model_state_bytes(const std::vector<torch::Tensor>& optimizer_state) const {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  for (const auto& bk : buckets_) {
    if (bk.flat.defined()) grads.push_back(bk.flat);
    if (bk.gshard.defined()) grads.push_back(bk.gshard);
  }
  if (z3_) return zero3_model_state(grads, optimizer_state);  // the shards, and the gathered peak
  return count_model_state(params_, grads, optimizer_state);
}

ModelStateBytes count_model_state(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                                  const std::vector<torch::Tensor>& optimizer_state) {
  // Each storage once, in the first category that names it (a gradient alias of a bucket is
  // the bucket; the parameters of a flat bucket are the bucket).
  std::unordered_set<const void*> seen;
  auto count = [&](const std::vector<torch::Tensor>& ts) {
    std::int64_t bytes = 0;
    for (const auto& t : ts) {
      if (!t.defined() || !t.has_storage()) continue;
      const void* s = t.storage().unsafeGetStorageImpl();
      if (seen.insert(s).second) bytes += static_cast<std::int64_t>(t.storage().nbytes());
    }
    return bytes;
  };
  ModelStateBytes b;
  b.params = count(params);
  b.grads = count(grads);
  b.optimizer = count(optimizer_state);
  return b;
}

}  // namespace trainbox::dist
