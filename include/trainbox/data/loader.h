// trainbox/data/loader.h — batches from an in-memory uint8 dataset, ready on the device.
//
// Data stays uint8 in host memory (4x smaller than float) and is converted and
// normalised per batch. A background thread prepares up to `prefetch` batches ahead; on
// CUDA they are staged in pinned memory and copied with non_blocking = true, or — with
// device_resident — the whole dataset lives on the GPU and batches are gathered there.
// The order of an epoch is a function of (seed, epoch) alone, so a resumed run can
// start at any batch and see exactly the batches an uninterrupted run would have.
//
//   BatchLoader loader(splits.train, splits.norm, opts);
//   loader.start_epoch(epoch, /*first_batch=*/0);
//   while (auto b = loader.next()) train_step(b->x, b->y);
// Not thread-safe: one consumer.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <torch/types.h>

#include <trainbox/data/dataset.h>
#include <trainbox/data/sampler.h>

namespace trainbox::data {

struct LoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  std::uint64_t seed = 0;
  std::int64_t prefetch = 2;   // 0: prepare in the caller's thread
  torch::Device device = torch::kCPU;
  bool device_resident = false;
  // Data parallelism: this rank's shard of every epoch (DistributedSampler's layout).
  std::int64_t shard = 0, shards = 1;
};

struct Batch {
  torch::Tensor x;  // float [B, C, H, W], normalised, on the device
  torch::Tensor y;  // int64 [B], on the device
  std::int64_t index = 0;  // batch index within the epoch
};

class BatchLoader {
 public:
  BatchLoader(const Dataset& data, const Normalization& norm, LoaderOptions opts);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  std::int64_t batches_per_epoch() const;
  std::int64_t samples() const { return sampler_.shard_size(); }
  // Begins an epoch's order at `first_batch` (resume); stops any previous epoch.
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);
  std::optional<Batch> next();

 private:
  Batch make(std::int64_t b) const;           // host-side part: gather, convert, normalise
  Batch to_device(Batch b) const;
  void stop();

  Dataset data_;
  LoaderOptions opts_;
  std::int64_t n_ = 0;
  DistributedSampler sampler_;
  torch::Tensor scale_, shift_;               // per-channel x*scale - shift == (x/255 - mean) / std
  torch::Tensor order_;                       // this epoch's sample order (int64, on the data's device)
  std::int64_t next_batch_ = 0;
  // --- prefetch thread ---
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  bool stop_ = false, done_ = false;
  std::exception_ptr error_;
};

}  // namespace trainbox::data
