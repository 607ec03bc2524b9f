// trainbox/data/image_source.h — data.dataset = "imagefolder" | "webdataset" as Sources
// (data/source.h): encoded images on disk, decoded, cropped and normalised per batch on a pool
// of decode threads (docs/datasets.md).
//
// Why threads in the one process and not DataLoader-style worker processes: no fork, so no
// copy-on-write growth of the listing (pytorch/pytorch#13246), no per-epoch start-up, and no
// GIL; the decoders (TurboJPEG, libpng) release nothing because they hold nothing.
//
// Determinism: sample i of epoch e is read, cropped and flipped from sample_rng(seed, e, i)
// alone (data/image/transform.h), and each decode thread writes only its own rows of the
// batch, so a batch is bit for bit the same for any data.workers and any order the threads
// run in; the loader's order is (seed, epoch)'s (data/sampler.h), so mid-epoch resume is exact.
//
// Memory ceiling (documented in docs/datasets.md): one batch of float32 per prefetched batch
// ((prefetch + 2) × batch × 3 × size² × 4 bytes), plus per decode thread one encoded file and
// one decoded image (≤ kMaxPixels × 3 bytes; a 500×375 JPEG is 0.56 MB). Nothing grows with
// the epoch: the listing is built once, the pool and its buffers are reused.
//
//   Splits s = load_image_splits(cfg.data, seed);   // train + val (= test) Sources
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <trainbox/data/config.h>
#include <trainbox/data/source.h>
#include <trainbox/util/errors.h>

namespace trainbox::data {

// Where each sample's encoded bytes are: image files of a folder, or members of tar shards.
// read() and name() are called from every decode thread at once.
class EncodedImages {
 public:
  virtual ~EncodedImages() = default;
  virtual std::int64_t size() const = 0;
  virtual std::int32_t label(std::int64_t i) const = 0;
  virtual std::string name(std::int64_t i) const = 0;  // for messages: the file, or "shard.tar: key"
  virtual void read(std::int64_t i, std::vector<std::uint8_t>& out) const = 0;  // DataError when unreadable
  virtual std::int32_t stream(std::int64_t /*i*/) const { return -1; }          // the tar shard it is in (-1: a file)
};

// The transform of one split: train = RandomResizedCrop + flip, eval = Resize + CenterCrop;
// both end in (x/255 - mean)/std as float32 CHW.
struct ImageTransform {
  bool train = true;
  int size = 224;    // output height and width
  int resize = 256;  // eval: the shorter side before the centre crop
  double scale_lo = 0.08, scale_hi = 1.0, ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
  bool hflip = true;
  float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
};

// A fixed pool of threads running one parallel loop at a time (the caller's thread joins in).
class DecodePool {
 public:
  explicit DecodePool(int threads);
  ~DecodePool();
  DecodePool(const DecodePool&) = delete;
  DecodePool& operator=(const DecodePool&) = delete;
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(i, thread) for i in [0, n) across the pool; returns when all are done. fn must not throw.
  // Callers from several threads (a train loader's prefetch thread, evaluation) take turns.
  void run(std::int64_t n, const std::function<void(std::int64_t, int)>& fn);

 private:
  void loop(int id);
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one loop at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(std::int64_t, int)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::atomic<std::int64_t> next_{0};
  int busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

class ImageFileSource : public Source {
 public:
  ImageFileSource(std::shared_ptr<const EncodedImages> images, ImageTransform t, std::shared_ptr<DecodePool> pool,
                  std::uint64_t seed, bool skip_bad, bool channels_last, std::string description);
  std::int64_t size() const override { return images_->size(); }
  Example get_batch(const torch::Tensor& indices) const override { return get_epoch_batch(indices, 0); }
  Example get_epoch_batch(const torch::Tensor& indices, std::int64_t epoch) const override;
  std::string describe() const override { return description_; }
  std::vector<std::int32_t> stream_groups() const override;  // the shard of each sample (none: a folder)
  SkippedSamples skipped() const override;                   // every image source of the process together

 private:
  std::shared_ptr<const EncodedImages> images_;
  ImageTransform t_;
  std::shared_ptr<DecodePool> pool_;
  std::uint64_t seed_;
  bool skip_bad_, channels_last_;
  std::string description_;
};

// The one message for a sample that cannot be read or decoded (`name`: the file, or "shard.tar: key"),
// thrown by the Source under data.on_bad_image = "error" and by `trainbox bench dataloader`.
DataError bad_image_error(const std::string& name, const std::string& reason);

// The pieces load_image_splits builds from, for `trainbox bench dataloader`'s per-phase figures:
// data.path's samples (listed or indexed), a split's transform, the decode thread count.
std::shared_ptr<const EncodedImages> open_images(const DataConfig& c, const std::string& where);
ImageTransform transform_of(const DataConfig& c, bool train);
int decode_threads(const DataConfig& c);

// The train and val (= test) Sources of data.dataset = "imagefolder" or "webdataset", from
// data.path and data.val_path (or a data.val_fraction split of data.path, seeded).
Splits load_image_splits(const DataConfig& c, std::uint64_t seed);

}  // namespace trainbox::data
