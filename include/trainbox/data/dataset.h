// trainbox/data/dataset.h — datasets held in memory as uint8, converted per batch.
//
// Formats: IDX (MNIST / Fashion-MNIST; gzip or raw), CIFAR-10 binary batches, and seeded
// synthetic data. Every file is validated (magic, dimensions, counts, label range) and a
// bad one is a DataError naming the file, the byte offset and what was expected.
//
//   auto splits = trainbox::data::load_datasets(cfg.data, cfg.train.seed);
//   splits.train.images   // uint8 [N, C, H, W];  splits.train.labels  // int64 [N]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include <trainbox/data/config.h>
#include <trainbox/data/source.h>

namespace trainbox::data {

struct Dataset {
  torch::Tensor images;  // uint8 [N, C, H, W]
  torch::Tensor labels;  // int64 [N]
  std::int64_t classes = 0;
  std::int64_t size() const { return images.defined() ? images.size(0) : 0; }
};

struct Normalization {
  std::vector<float> mean, std;  // per channel, in [0, 1] pixel units
};

struct DatasetSplits {
  Dataset train, val, test;  // val is empty unless data.val_fraction > 0
  Normalization norm;        // from the training split (identity when data.normalize = false)
  std::string description;   // "Fashion-MNIST (idx): 60000 train, 10000 test, 1x28x28, 10 classes"
};

DatasetSplits load_datasets(const DataConfig& cfg, std::uint64_t seed);

// An image dataset as a Source: batches of float [B, C, H, W], normalised, and int64 labels.
class ImageSource : public Source {
 public:
  ImageSource(Dataset data, const Normalization& norm);
  std::int64_t size() const override { return data_.size(); }
  Example get_batch(const torch::Tensor& indices) const override;
  std::shared_ptr<const Source> to_device(const torch::Device& device) const override;
  std::string describe() const override { return description_; }
  std::string description_;

 private:
  Dataset data_;
  torch::Tensor scale_, shift_;  // per-channel x*scale - shift == (x/255 - mean) / std
};

// Every built-in dataset as Sources: idx, cifar10 and synthetic (load_datasets), or text
// (data/text.h; windows of `block_size` tokens).
Splits load_splits(const DataConfig& cfg, std::uint64_t seed, std::int64_t block_size);

// One IDX pair. Throws DataError naming the file and offset on any inconsistency.
Dataset load_idx(const std::string& images_path, const std::string& labels_path, std::int64_t classes = 10);
// CIFAR-10 binary batches (each record: 1 label byte + 3072 pixel bytes).
Dataset load_cifar10(const std::vector<std::string>& files);
// Seeded class-conditional data: the class means depend on `seed`; `split` picks an
// independent draw of samples (0 train, 1 test) around the same means.
Dataset make_synthetic(std::int64_t samples, const std::vector<std::int64_t>& shape, std::int64_t classes,
                       std::uint64_t seed, std::uint64_t split = 0);

}  // namespace trainbox::data
