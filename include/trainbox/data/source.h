// trainbox/data/source.h — what the trainer needs from a dataset: its size, and the
// samples at some indices as one batch. Built-in datasets (images, text) implement it;
// so can a user's, directly or through the torch::data adapter below.
//
//   class MyData : public trainbox::data::Source {
//    public:
//     std::int64_t size() const override { return n_; }
//     Example get_batch(const torch::Tensor& idx) const override {   // idx: int64 [B]
//       return {x_.index_select(0, idx), y_.index_select(0, idx)};
//     }
//   };
//
// The loader (data/loader.h) decides the order (seeded by (seed, epoch), sharded across
// ranks), calls get_batch from one thread at a time — a background thread when it
// prefetches — and moves the batch to the device.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/data/datasets/base.h>
#include <torch/types.h>

namespace trainbox::data {

// Samples a Source left out because they would not decode (data.on_bad_image = "skip").
struct SkippedSamples {
  std::int64_t count = 0;
  std::vector<std::string> first;  // the first few, "file: reason"
};

struct Example {
  torch::Tensor x;  // model input, [B, ...]
  torch::Tensor y;  // target, [B] (class per sample) or [B, T] (class per position)
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::int64_t size() const = 0;
  // The samples at `indices` (int64 [B], on the device the data lives on) as one batch.
  virtual Example get_batch(const torch::Tensor& indices) const = 0;
  // The same batch in epoch `epoch`, which is what the loader calls: a Source with random
  // augmentation (image crops, flips) draws it from (seed, epoch, sample index), so a resumed
  // epoch sees the same crops; the default has no randomness and ignores the epoch.
  virtual Example get_epoch_batch(const torch::Tensor& indices, std::int64_t /*epoch*/) const {
    return get_batch(indices);
  }
  // A copy that lives on `device` and builds its batches there (data.device_resident),
  // or nullptr when the dataset cannot move.
  virtual std::shared_ptr<const Source> to_device(const torch::Device& device) const { return nullptr; }
  // The stream each sample belongs to (a tar shard: one id per sample, in index order), for
  // data.shuffle_buffer; empty: no such grouping (a folder, in-memory data).
  virtual std::vector<std::int32_t> stream_groups() const { return {}; }
  // What it skipped so far (bad images under data.on_bad_image = "skip"): the run summary's.
  virtual SkippedSamples skipped() const { return {}; }
  // One line for logs: "Fashion-MNIST (idx): 60000 train, 10000 test, 1x28x28, 10 classes".
  virtual std::string describe() const { return {}; }
};

// Every split of one dataset, and what a model built for it needs to know.
struct Splits {
  std::shared_ptr<const Source> train, val, test;  // val may be null (no validation split)
  std::vector<std::int64_t> sample_shape;          // the shape of one x: {C, H, W}, or {T} for tokens
  std::int64_t classes = 0;                        // classes, or the vocabulary size for tokens
  std::int64_t token_vocab = 0;  // labelled text: the largest token id + 1 (the model's vocabulary must hold it)
  std::string description;
  // Images: the normalisation the sources apply, (pixel / 255 - mean) / std per channel
  // (exported with the model: ONNX metadata); empty when unknown or not images.
  std::vector<float> input_mean, input_std;
};

// Adapter for a torch::data dataset whose get(i) returns torch::data::Example<>:
//   auto src = std::make_shared<TorchDataSource<torch::data::datasets::MNIST>>(MNIST("data"));
template <class D>
class TorchDataSource : public Source {
 public:
  explicit TorchDataSource(D dataset) : d_(std::move(dataset)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(*d_.size()); }
  Example get_batch(const torch::Tensor& indices) const override {
    auto idx = indices.to(torch::kCPU);
    std::vector<torch::Tensor> xs, ys;
    const auto* p = idx.template data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < idx.numel(); ++i) {
      auto e = d_.get(static_cast<std::size_t>(p[i]));
      xs.push_back(e.data);
      ys.push_back(e.target);
    }
    return {torch::stack(xs), torch::stack(ys)};
  }

 private:
  mutable D d_;  // torch::data's get() is not const
};

}  // namespace trainbox::data
