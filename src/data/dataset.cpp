#include <trainbox/data/dataset.h>

#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/data/text.h>
#include <trainbox/data/text_classes.h>
#include <trainbox/util/errors.h>

#include <trainbox/data/formats.h>
#include <trainbox/data/image_source.h>

namespace trainbox::data {
namespace fs = std::filesystem;

// The bytes are checked in formats.cpp (torch-free, fuzzed: tests/fuzz); here they become tensors.
Dataset load_idx(const std::string& images_path, const std::string& labels_path, std::int64_t classes) {
  std::string ib = read_maybe_gz(images_path), lb = read_maybe_gz(labels_path);
  const IdxPair idx = parse_idx_pair(ib, images_path, lb, labels_path, classes);
  const auto& dims = idx.images.dims;
  Dataset d;
  d.classes = classes;
  d.images = torch::empty({dims[0], 1, dims[1], dims[2]}, torch::kUInt8);
  std::memcpy(d.images.data_ptr(), ib.data() + idx.images.data_offset, ib.size() - idx.images.data_offset);
  d.labels =
      torch::from_blob(lb.data() + idx.labels.data_offset, {idx.labels.dims[0]}, torch::kUInt8).to(torch::kInt64);
  return d;
}

Dataset load_cifar10(const std::vector<std::string>& files) {
  std::vector<torch::Tensor> imgs, labels;
  for (const auto& path : files) {
    std::string b = read_maybe_gz(path);
    const std::int64_t n = parse_cifar10(b, path);
    auto raw = torch::from_blob(b.data(), {n, std::int64_t(kCifar10RecordBytes)}, torch::kUInt8).clone();
    labels.push_back(raw.select(1, 0).to(torch::kInt64));
    imgs.push_back(raw.slice(1, 1).reshape({n, 3, 32, 32}));
  }
  return Dataset{torch::cat(imgs), torch::cat(labels), 10};
}

Dataset make_synthetic(std::int64_t samples, const std::vector<std::int64_t>& shape, std::int64_t classes,
                       std::uint64_t seed, std::uint64_t split) {
  // Learnable, not just noise: each class has a mean image (from `seed`, shared by the
  // splits); samples (from `seed` and `split`) add noise around it.
  auto centers_gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto centers = torch::randint(0, 256, {classes, shape[0], shape[1], shape[2]}, centers_gen, torch::kInt16);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 7919 + split + 1);
  Dataset d;
  d.classes = classes;
  d.labels = torch::randint(classes, {samples}, gen, torch::kInt64);
  auto noise = torch::randint(-48, 49, {samples, shape[0], shape[1], shape[2]}, gen, torch::kInt16);
  d.images = (centers.index_select(0, d.labels) + noise).clamp(0, 255).to(torch::kUInt8);
  return d;
}

// Debian packages no CIFAR-10; the binary version is the one the format reader reads.
constexpr const char* kCifar10Fix =
    "download the CIFAR-10 binary version (cifar-10-binary.tar.gz, 162 MB, from "
    "https://www.cs.toronto.edu/~kriz/cifar.html), unpack it with `tar xzf cifar-10-binary.tar.gz -C data` "
    "(that makes data/cifar-10-batches-bin/, configs/cifar10_resnet.toml's data.path), or set data.path to "
    "the folder with data_batch_1..5.bin and test_batch.bin";

DatasetSplits load_datasets(const DataConfig& c, std::uint64_t seed) {
  DatasetSplits s;
  std::string name;
  if (c.dataset == "idx") {
    auto pick = [&](const std::string& stem) {
      for (const char* ext : {".gz", ""})
        if (fs::exists(c.path + "/" + stem + ext)) return c.path + "/" + stem + ext;
      throw DataError(fmt::format("no {}[.gz] in data.path = \"{}\"", stem, c.path),
                      "install Fashion-MNIST (apt-get install dataset-fashion-mnist) or set data.path to a directory "
                      "with the four IDX files");
    };
    s.train = load_idx(pick("train-images-idx3-ubyte"), pick("train-labels-idx1-ubyte"));
    s.test = load_idx(pick("t10k-images-idx3-ubyte"), pick("t10k-labels-idx1-ubyte"));
    name = c.path.find("fashion") != std::string::npos ? "Fashion-MNIST (idx)" : "IDX";
  } else if (c.dataset == "cifar10") {
    std::vector<std::string> train_files;
    for (int i = 1; i <= 5; ++i) train_files.push_back(fmt::format("{}/data_batch_{}.bin", c.path, i));
    std::vector<std::string> missing;
    for (const auto& f : train_files)
      if (!fs::exists(f)) missing.push_back(fs::path(f).filename().string());
    if (!fs::exists(c.path + "/test_batch.bin")) missing.push_back("test_batch.bin");
    if (!missing.empty())
      throw DataError(fmt::format("no CIFAR-10 binary batches in data.path = \"{}\" (missing: {})", c.path,
                                  fmt::join(missing, ", ")),
                      kCifar10Fix);
    s.train = load_cifar10(train_files);
    s.test = load_cifar10({c.path + "/test_batch.bin"});
    name = "CIFAR-10";
  } else if (c.dataset == "synthetic") {
    s.train = make_synthetic(c.synthetic_samples, c.synthetic_shape, c.synthetic_classes, seed, 0);
    s.test = make_synthetic(std::max<std::int64_t>(1, c.synthetic_samples / 6), c.synthetic_shape, c.synthetic_classes,
                            seed, 1);
    name = "synthetic";
  } else {
    throw ConfigError("data.dataset = \"" + c.dataset + "\" is not a dataset format",
                      "use idx, cifar10, synthetic or text");
  }
  if (c.limit > 0 && c.limit < s.train.size()) {
    s.train.images = s.train.images.slice(0, 0, c.limit);
    s.train.labels = s.train.labels.slice(0, 0, c.limit);
  }
  if (c.val_fraction > 0) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 3);
    auto perm = torch::randperm(s.train.size(), gen);
    std::int64_t nval = std::max<std::int64_t>(1, std::int64_t(s.train.size() * c.val_fraction));
    auto vi = perm.slice(0, 0, nval), ti = perm.slice(0, nval);
    s.val = Dataset{s.train.images.index_select(0, vi), s.train.labels.index_select(0, vi), s.train.classes};
    s.train = Dataset{s.train.images.index_select(0, ti), s.train.labels.index_select(0, ti), s.train.classes};
  }
  const std::int64_t channels = s.train.images.size(1);
  if (c.normalize) {
    auto f = s.train.images.to(torch::kFloat64).div_(255.0).transpose(0, 1).reshape({channels, -1});
    auto mean = f.mean(1), std = f.std(1);
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      s.norm.mean.push_back(float(mean[ch].item<double>()));
      s.norm.std.push_back(float(std::max(std[ch].item<double>(), 1e-6)));
    }
  } else {
    s.norm.mean.assign(channels, 0.0f);
    s.norm.std.assign(channels, 1.0f);
  }
  s.description = fmt::format("{}: {} train, {} val, {} test, {}x{}x{}, {} classes", name, s.train.size(), s.val.size(),
                              s.test.size(), channels, s.train.images.size(2), s.train.images.size(3), s.train.classes);
  return s;
}

ImageSource::ImageSource(Dataset data, const Normalization& norm) : data_(std::move(data)) {
  const std::int64_t c = data_.images.size(1);
  std::vector<float> scale(c), shift(c);
  for (std::int64_t i = 0; i < c; ++i) {
    scale[i] = 1.0f / (255.0f * norm.std.at(i));
    shift[i] = norm.mean.at(i) / norm.std.at(i);
  }
  scale_ = torch::tensor(scale).view({1, c, 1, 1});
  shift_ = torch::tensor(shift).view({1, c, 1, 1});
}

Example ImageSource::get_batch(const torch::Tensor& idx) const {
  Example e;
  e.x = data_.images.index_select(0, idx).to(torch::kFloat32).mul_(scale_).sub_(shift_);
  e.y = data_.labels.index_select(0, idx);
  return e;
}

std::shared_ptr<const Source> ImageSource::to_device(const torch::Device& device) const {
  auto moved = std::make_shared<ImageSource>(*this);
  moved->data_.images = data_.images.to(device);
  moved->data_.labels = data_.labels.to(device);
  moved->scale_ = scale_.to(device);
  moved->shift_ = shift_.to(device);
  return moved;
}

Splits load_splits(const DataConfig& c, std::uint64_t seed, std::int64_t block_size) {
  if (c.dataset == "text") return load_text(c, block_size);
  if (c.dataset == "text_classes") return load_text_classes(c, block_size);
  if (c.dataset == "imagefolder" || c.dataset == "webdataset") return load_image_splits(c, seed);
  DatasetSplits d = load_datasets(c, seed);
  Splits s;
  s.train = std::make_shared<ImageSource>(d.train, d.norm);
  if (d.val.size() > 0) s.val = std::make_shared<ImageSource>(d.val, d.norm);
  s.test = std::make_shared<ImageSource>(d.test, d.norm);
  s.sample_shape = {d.train.images.size(1), d.train.images.size(2), d.train.images.size(3)};
  s.classes = d.train.classes;
  s.description = d.description;
  s.input_mean = d.norm.mean;
  s.input_std = d.norm.std;
  return s;
}

}  // namespace trainbox::data
