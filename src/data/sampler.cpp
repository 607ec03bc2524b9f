#include <trainbox/data/sampler.h>

#include <algorithm>
#include <utility>

#include <torch/torch.h>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

#include <trainbox/data/image/transform.h>

namespace trainbox::data {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, SamplerOptions o) : n_(dataset_size), o_(o) {
  if (o_.world < 1 || o_.rank < 0 || o_.rank >= o_.world)
    throw UsageError("sampler rank " + std::to_string(o_.rank) + " of world " + std::to_string(o_.world));
  if (o_.global_batch > 0 && o_.global_batch % o_.world != 0)
    throw UsageError(fmt::format("a global batch of {} does not split over a world of {}", o_.global_batch, o_.world),
                     "choose a global batch divisible by every world size the job may have");
  if (!o_.groups.empty() && static_cast<std::int64_t>(o_.groups.size()) != n_)
    throw UsageError(fmt::format("{} stream ids for {} samples", o_.groups.size(), n_));
}

std::int64_t DistributedSampler::shard_size() const {
  if (o_.global_batch > 0) return n_ / o_.global_batch * (o_.global_batch / o_.world);
  return o_.drop_last ? n_ / o_.world : (n_ + o_.world - 1) / o_.world;
}

std::vector<std::int64_t> buffered_order(const std::vector<std::int32_t>& groups, std::int64_t buffer,
                                         std::uint64_t rng_seed) {
  image::Rng rng(rng_seed);  // the image transforms' splitmix64 stream
  const auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng.randint(0, std::int64_t(n))); };
  // Each stream's samples in index order, the streams in first-seen order (ids are small: shard numbers).
  std::vector<std::vector<std::int64_t>> members;
  std::vector<std::int64_t> slot_of;  // stream id → its place in members
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto g = static_cast<std::size_t>(groups[i]);
    if (g >= slot_of.size()) slot_of.resize(g + 1, -1);
    if (slot_of[g] < 0) {
      slot_of[g] = static_cast<std::int64_t>(members.size());
      members.emplace_back();
    }
    members[static_cast<std::size_t>(slot_of[g])].push_back(static_cast<std::int64_t>(i));
  }
  // The streams in a seeded order (Fisher–Yates).
  std::vector<std::size_t> stream_order(members.size());
  for (std::size_t i = 0; i < stream_order.size(); ++i) stream_order[i] = i;
  for (std::size_t i = stream_order.size(); i > 1; --i) std::swap(stream_order[i - 1], stream_order[below(i)]);
  // webdataset's _shuffle over the concatenated stream.
  const auto cap = static_cast<std::size_t>(std::max<std::int64_t>(buffer, 1));
  const std::size_t initial = std::min<std::size_t>(100, cap);
  std::vector<std::int64_t> out, buf;
  out.reserve(groups.size());
  buf.reserve(cap + 1);
  const auto pick = [&] {
    const std::size_t k = below(buf.size());
    out.push_back(buf[k]);
    buf[k] = buf.back();
    buf.pop_back();
  };
  std::size_t s = 0, m = 0;  // the stream being read, and the next member in it
  const auto read = [&](std::int64_t& sample) {
    while (s < stream_order.size() && m >= members[stream_order[s]].size()) ++s, m = 0;
    if (s >= stream_order.size()) return false;
    sample = members[stream_order[s]][m++];
    return true;
  };
  for (std::int64_t x; read(x);) {
    buf.push_back(x);
    if (buf.size() < cap && read(x)) buf.push_back(x);
    if (buf.size() >= initial) pick();
  }
  while (!buf.empty()) pick();
  return out;
}

torch::Tensor DistributedSampler::indices() const {
  torch::Tensor order;
  if (o_.shuffle && o_.shuffle_buffer > 0 && !o_.groups.empty()) {
    auto v = buffered_order(o_.groups, o_.shuffle_buffer, o_.seed * 1000003ULL + std::uint64_t(epoch_) + 17);
    order = torch::tensor(v, torch::kInt64);
  } else if (o_.shuffle) {
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
