// trainbox/data/sampler.h — which samples each rank sees in an epoch.
//
// The epoch's order is a permutation seeded by (seed, epoch) alone, so every rank computes
// the same one without talking; rank r takes positions r, r + world, r + 2·world, …
// (torch.utils.data.DistributedSampler's layout), so batch b of every rank together is
// exactly batch b of a single process with world× the batch size. Shards are equal in
// length — padded by wrapping around (default) or with the tail dropped — so no rank
// waits forever at the last batch.
//
//   DistributedSampler s(dataset_size, {.rank = r, .world = w, .seed = 0});
//   s.set_epoch(e);
//   torch::Tensor idx = s.indices();     // int64, this rank's shard, in order
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace trainbox::data {

struct SamplerOptions {
  std::int64_t rank = 0, world = 1;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;  // false: pad by repeating the first samples
  // > 0: the epoch is floor(n / global_batch) global batches: the permutation's tail is dropped
  // before the ranks take their positions, so the steps (and which samples each holds) are the
  // same at every world size that divides global_batch (elastic jobs).
  std::int64_t global_batch = 0;
  // > 0 with `groups` (one stream id per sample, e.g. its tar shard): WebDataset's order
  // instead of a global permutation. The streams in a seeded order, each stream's samples in
  // index order, mixed by webdataset's shuffle(buffer) rule (buffered_order). Still a
  // function of (seed, epoch): the ranks' positions, resume and thread counts are as above.
  std::int64_t shuffle_buffer = 0;
  std::vector<std::int32_t> groups;
};

// The streams of `groups` (one id per sample) in an order permuted by `rng_seed`, each
// stream's samples in index order, through a buffer of `buffer` samples: webdataset's
// `_shuffle` (fill to `buffer`, two reads per output while filling, start emitting at
// min(100, buffer); emit a uniformly drawn slot, the last one filling its place; drain at
// the end). Output position p holds a sample from stream position ≤ p + buffer.
std::vector<std::int64_t> buffered_order(const std::vector<std::int32_t>& groups, std::int64_t buffer,
                                         std::uint64_t rng_seed);

class DistributedSampler {
 public:
  DistributedSampler(std::int64_t dataset_size, SamplerOptions o);
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t shard_size() const;  // the same on every rank
  torch::Tensor indices() const;    // this rank's shard for the current epoch

 private:
  std::int64_t n_;
  SamplerOptions o_;
  std::int64_t epoch_ = 0;
};

}  // namespace trainbox::data
