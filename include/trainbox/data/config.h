// trainbox/data/config.h — the [data] section of the training config.
// (Parsed and documented with every other key in train/config.cpp's table.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainbox::data {

struct DataConfig {
  std::string dataset = "idx";  // idx | cifar10 | synthetic | text
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
};

}  // namespace trainbox::data
