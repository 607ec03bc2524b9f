#include <trainbox/data/sampler.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::data {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, SamplerOptions o) : n_(dataset_size), o_(o) {
  if (o_.world < 1 || o_.rank < 0 || o_.rank >= o_.world)
    throw UsageError("sampler rank " + std::to_string(o_.rank) + " of world " + std::to_string(o_.world));
  if (o_.global_batch > 0 && o_.global_batch % o_.world != 0)
    throw UsageError(fmt::format("a global batch of {} does not split over a world of {}", o_.global_batch, o_.world),
                     "choose a global batch divisible by every world size the job may have");
}

std::int64_t DistributedSampler::shard_size() const {
  if (o_.global_batch > 0) return n_ / o_.global_batch * (o_.global_batch / o_.world);
  return o_.drop_last ? n_ / o_.world : (n_ + o_.world - 1) / o_.world;
}

torch::Tensor DistributedSampler::indices() const {
  torch::Tensor order;
  if (o_.shuffle) {
    // A function of (seed, epoch) only: every rank — and a resumed run — computes the same.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(o_.seed * 1000003ULL + std::uint64_t(epoch_) + 17);
    order = torch::randperm(n_, gen);
  } else {
    order = torch::arange(n_);
  }
  const std::int64_t total = shard_size() * o_.world;  // global batches: the tail beyond them is dropped
  if (total > n_)
    order = torch::cat({order, order.slice(0, 0, total - n_)});  // pad by wrapping
  else
    order = order.slice(0, 0, total);
  return order.slice(0, o_.rank, total, o_.world).contiguous();
}

}  // namespace trainbox::data
