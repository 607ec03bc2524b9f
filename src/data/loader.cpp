#include <trainbox/data/loader.h>

#include <c10/util/ParallelGuard.h>
#include <torch/torch.h>

namespace trainbox::data {

BatchLoader::BatchLoader(std::shared_ptr<const Source> source, LoaderOptions opts)
    : source_(std::move(source)),
      opts_(std::move(opts)),
      sampler_(source_->size(),
               SamplerOptions{opts_.shard, opts_.shards, opts_.shuffle, opts_.seed, false, opts_.global_batch,
                              opts_.shuffle_buffer,
                              opts_.shuffle_buffer > 0 ? source_->stream_groups() : std::vector<std::int32_t>{}}) {
  if (opts_.device_resident && opts_.device.is_cuda()) {
    // Move data to the GPU once and keep it there: batches never cross PCIe again.
    if (auto moved = source_->to_device(opts_.device)) {
      source_ = std::move(moved);
      resident_ = true;
    }
  }
}

BatchLoader::BatchLoader(const Dataset& data, const Normalization& norm, LoaderOptions opts)
    : BatchLoader(std::make_shared<ImageSource>(data, norm), std::move(opts)) {}

BatchLoader::~BatchLoader() { stop(); }

std::int64_t BatchLoader::batches_per_epoch() const {
  const std::int64_t n = sampler_.shard_size();
  return opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
}

Batch BatchLoader::make(std::int64_t b) const {
  const std::int64_t n = order_.size(0);
  const std::int64_t begin = b * opts_.batch_size, end = std::min(n, begin + opts_.batch_size);
  auto idx = order_.slice(0, begin, end);
  Batch out;
  out.index = b;
  out.samples = idx;
  auto ex = source_->get_epoch_batch(idx, epoch_);
  out.x = std::move(ex.x);
  out.y = std::move(ex.y);
  if (opts_.device.is_cuda() && !out.x.is_cuda()) {
    out.x = out.x.pin_memory();
    out.y = out.y.pin_memory();
  }
  return out;
}

Batch BatchLoader::to_device(Batch b) const {
  if (b.x.device() != opts_.device) {
    b.x = b.x.to(opts_.device, /*non_blocking=*/true);
    b.y = b.y.to(opts_.device, /*non_blocking=*/true);
  }
  return b;
}

void BatchLoader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  ready_.clear();
  stop_ = done_ = false;
  error_ = nullptr;
}

void BatchLoader::start_epoch(std::int64_t epoch, std::int64_t first_batch) {
  stop();
  epoch_ = epoch;
  sampler_.set_epoch(epoch);  // depends on (seed, epoch) only: resume reproduces it without saved RNG state
  order_ = resident_ ? sampler_.indices().to(opts_.device) : sampler_.indices();
  next_batch_ = first_batch;
  // A background thread only pays when a core is free for it: on CPU training the intra-op
  // threads occupy every core (and spin between ops), and a third busy thread halves the
  // step rate on a 2-core machine. With a GPU the host threads mostly wait, so it helps.
  const bool spare_core =
      opts_.device.is_cuda() || static_cast<int>(std::thread::hardware_concurrency()) > at::get_num_threads();
  const bool threaded = opts_.prefetch > 0 && !resident_ && spare_core;
  if (!threaded) return;
  worker_ = std::thread([this, first_batch] {
    try {
      torch::NoGradGuard guard;  // no autograd bookkeeping for data preparation
      // Run this thread's ops single-threaded: a second OpenMP team next to the training
      // thread's oversubscribes the cores (2x slower end to end on a 2-core machine).
      c10::ParallelGuard serial(true);
      for (std::int64_t b = first_batch; b < batches_per_epoch(); ++b) {
        Batch batch = make(b);
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return stop_ || std::int64_t(ready_.size()) < opts_.prefetch; });
        if (stop_) return;
        ready_.push_back(std::move(batch));
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    cv_.notify_all();
  });
}

std::optional<Batch> BatchLoader::next() {
  if (!worker_.joinable()) {
    if (next_batch_ >= batches_per_epoch()) return std::nullopt;
    torch::NoGradGuard guard;
    return to_device(make(next_batch_++));
  }
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return !ready_.empty() || done_ || error_; });
  if (error_) std::rethrow_exception(error_);
  if (ready_.empty()) return std::nullopt;
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  lk.unlock();
  ++next_batch_;
  return to_device(std::move(b));
}

}  // namespace trainbox::data
