// trainbox/data/loader.h — batches from a dataset (data/source.h), ready on the device.
//
// The Source builds each batch from its indices (the built-in ones keep data compact —
// uint8 images, byte tokens — and convert per batch). A background thread prepares up to
// `prefetch` batches ahead; on CUDA they are staged in pinned memory and copied with
// non_blocking = true, or — with device_resident — the whole dataset lives on the GPU and
// batches are gathered there.
// The order of an epoch is a function of (seed, epoch) alone, so a resumed run can
// start at any batch and see exactly the batches an uninterrupted run would have.
//
//   BatchLoader loader(splits.train, opts);             // a std::shared_ptr<const Source>
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
#include <trainbox/data/source.h>

namespace trainbox::data {

struct LoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  std::uint64_t seed = 0;
  std::int64_t prefetch = 2;  // 0: prepare in the caller's thread
  torch::Device device = torch::kCPU;
  bool device_resident = false;
  // Data parallelism: this rank's shard of every epoch (DistributedSampler's layout).
  std::int64_t shard = 0, shards = 1;
  std::int64_t global_batch = 0;    // SamplerOptions::global_batch (elastic jobs)
  std::int64_t shuffle_buffer = 0;  // SamplerOptions::shuffle_buffer, over the source's stream_groups()
};

struct Batch {
  torch::Tensor x;         // the Source's input batch, on the device
  torch::Tensor y;         // its targets, on the device
  std::int64_t index = 0;  // batch index within the epoch
  torch::Tensor samples;   // the sample indices it holds (int64, on the order's device)
};

class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const Source> source, LoaderOptions opts);
  // An in-memory image dataset (wrapped in an ImageSource).
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
  Batch make(std::int64_t b) const;  // host-side part: gather, convert, normalise
  Batch to_device(Batch b) const;
  void stop();

  std::shared_ptr<const Source> source_;
  LoaderOptions opts_;
  bool resident_ = false;  // the source lives on the device
  DistributedSampler sampler_;
  torch::Tensor order_;  // this epoch's sample order (int64, on the data's device)
  std::int64_t next_batch_ = 0;
  std::int64_t epoch_ = 0;
  // --- prefetch thread ---
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  bool stop_ = false, done_ = false;
  std::exception_ptr error_;
};

}  // namespace trainbox::data
