// trainbox/data/config.h — the [data] section of the training config.
// (Parsed and documented with every other key in train/config.cpp's table.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainbox::data {

struct DataConfig {
  std::string dataset = "idx";  // idx | cifar10 | synthetic | text | imagefolder | webdataset
  std::string path = "/usr/share/datasets/fashion-mnist";
  bool normalize = true;
  double val_fraction = 0.0;     // held out of the training set for validation
  std::int64_t limit = 0;        // use only the first N training samples (0 = all)
  bool device_resident = false;  // keep the whole dataset on the GPU
  std::int64_t prefetch = 2;     // batches prepared ahead by a background thread
  std::int64_t synthetic_samples = 60000;
  std::vector<std::int64_t> synthetic_shape = {1, 28, 28};
  std::int64_t synthetic_classes = 10;
  double text_holdout = 0.1;  // text: the last fraction of the tokens is the val split
  bool packing = false;       // text: positions restart and attention stops at each document start (text.h)
  // imagefolder / webdataset (docs/datasets.md): torchvision's ImageNet recipe by default
  std::string val_path;                                // the evaluation tree / shard pattern ("" = split)
  std::int64_t image_size = 224;                       // the crop fed to the model (size × size)
  std::int64_t resize_size = 0;                        // eval: shorter side before the centre crop (0 = size / 0.875)
  std::vector<double> crop_scale = {0.08, 1.0};        // RandomResizedCrop's area fraction range
  std::vector<double> crop_ratio = {0.75, 4.0 / 3.0};  // … and aspect ratio range
  bool hflip = true;                                   // random horizontal flip (train)
  std::vector<double> norm_mean = {0.485, 0.456, 0.406};  // data.mean, data.std: per channel (ImageNet's)
  std::vector<double> norm_std = {0.229, 0.224, 0.225};
  std::int64_t workers = 0;            // decode threads (0 = the cores of this rank)
  std::string on_bad_image = "error";  // error | skip
  bool channels_last = false;          // batches in channels_last memory format
  std::int64_t shuffle_buffer = 0;     // webdataset: 0 = one global permutation; N: shards, then a buffer of N
};

}  // namespace trainbox::data
