#include <trainbox/data/image_source.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <set>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/data/image/folder.h>
#include <trainbox/data/image/webdataset.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/unique_fd.h>

#include <trainbox/data/image/decode.h>
#include <trainbox/data/image/transform.h>

namespace trainbox::data {

// --- the decode pool ---
DecodePool::DecodePool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this, i] { loop(i); });
}

DecodePool::~DecodePool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void DecodePool::run(std::int64_t n, const std::function<void(std::int64_t, int)>& fn) {
  std::lock_guard<std::mutex> turn(run_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  cv_.notify_all();
  for (std::int64_t i; (i = next_.fetch_add(1)) < n;) fn(i, 0);
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return busy_ == 0; });
  fn_ = nullptr;
}

void DecodePool::loop(int id) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(std::int64_t, int)>* fn;
    std::int64_t n;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      n = n_;
    }
    for (std::int64_t i; (i = next_.fetch_add(1)) < n;) (*fn)(i, id);
    std::lock_guard<std::mutex> lk(mu_);
    if (--busy_ == 0) done_cv_.notify_all();
  }
}

namespace {

// Every image of a listed folder (a val split or data.limit is a Subset of it).
class FolderImages : public EncodedImages {
 public:
  explicit FolderImages(ImageFolderListing l) : l_(std::move(l)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(l_.size()); }
  std::int32_t label(std::int64_t i) const override { return l_.label(static_cast<std::size_t>(i)); }
  std::string name(std::int64_t i) const override { return l_.path(static_cast<std::size_t>(i)); }
  void read(std::int64_t i, std::vector<std::uint8_t>& out) const override {
    read_image_file(l_.path(static_cast<std::size_t>(i)), out);
  }
  const ImageFolderListing& listing() const { return l_; }

 private:
  ImageFolderListing l_;
};

// Every sample of every shard, indexed once (headers only); an image is one pread.
class ShardImages : public EncodedImages {
 public:
  struct Entry {
    std::uint32_t shard;
    std::int32_t label;
    std::uint64_t offset, size;
    std::string key;
  };
  ShardImages(std::vector<std::string> shards, std::vector<Entry> entries)
      : shards_(std::move(shards)), entries_(std::move(entries)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(entries_.size()); }
  std::int32_t label(std::int64_t i) const override { return e(i).label; }
  std::string name(std::int64_t i) const override { return shards_[e(i).shard] + ": " + e(i).key; }
  std::int32_t stream(std::int64_t i) const override { return static_cast<std::int32_t>(e(i).shard); }
  void read(std::int64_t i, std::vector<std::uint8_t>& out) const override {
    const Entry& x = e(i);
    const std::string& path = shards_[x.shard];
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw DataError(fmt::format("cannot open {}: {}", path, errno_text(errno)));
    out.resize(x.size);
    std::uint64_t done = 0;
    while (done < x.size) {
      const ssize_t r = ::pread(fd.get(), out.data() + done, x.size - done, static_cast<off_t>(x.offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw DataError(fmt::format("{}: short read of {} at byte {}", path, x.key, x.offset));
      done += static_cast<std::uint64_t>(r);
    }
  }

 private:
  const Entry& e(std::int64_t i) const { return entries_[static_cast<std::size_t>(i)]; }
  std::vector<std::string> shards_;
  std::vector<Entry> entries_;
};

std::shared_ptr<ShardImages> index_shards(const std::string& pattern) {
  std::vector<std::string> shards = expand_shards(pattern);
  std::vector<ShardImages::Entry> entries;
  for (std::size_t s = 0; s < shards.size(); ++s)
    for (auto& w : index_shard(shards[s]))
      entries.push_back({static_cast<std::uint32_t>(s), static_cast<std::int32_t>(w.label), w.image_offset,
                         w.image_size, std::move(w.key)});
  if (entries.empty())
    throw DataError(fmt::format("no samples in {} ({} shard{})", pattern, shards.size(), shards.size() == 1 ? "" : "s"),
                    "point data.path at tar shards of <key>.jpg + <key>.cls members (trainbox data pack writes them)");
  return std::make_shared<ShardImages>(std::move(shards), std::move(entries));
}

// --- skipped images, across every source of the process ---
// Each bad file counts once, however many epochs and splits meet it.
std::mutex g_skip_mu;
SkippedSamples g_skipped;
std::set<std::string> g_skipped_names;
constexpr std::size_t kSkippedNamed = 5;

void note_skipped(const std::string& name, const std::string& what) {
  std::lock_guard<std::mutex> lk(g_skip_mu);
  if (!g_skipped_names.insert(name).second) return;
  ++g_skipped.count;
  if (g_skipped.first.size() < kSkippedNamed) g_skipped.first.push_back(what);
}

// One sample: read, crop box, decode the box's region (scaled when the crop allows), resample into `out`.
void decode_sample(const EncodedImages& images, std::int64_t index, const ImageTransform& t, std::uint64_t seed,
                   std::int64_t epoch, std::vector<std::uint8_t>& bytes, float* out) {
  images.read(index, bytes);
  const auto h = image::read_header(bytes.data(), bytes.size());
  image::CropBox box;
  bool flip = false;
  if (t.train) {
    image::Rng rng = image::sample_rng(seed, epoch, index);
    box = image::random_resized_crop_box(h.width, h.height, t.scale_lo, t.scale_hi, t.ratio_lo, t.ratio_hi, rng);
    flip = t.hflip && rng.uniform(0, 1) < 0.5;
  } else {
    box = image::center_crop_box(h.width, h.height, t.resize, t.size, t.size);
  }
  const image::Size need = image::decode_size_for_crop(h.width, h.height, box, t.size, t.size);
  const image::Image img = image::decode(bytes.data(), bytes.size(), need.width, need.height, &box);
  image::resized_crop(img, box, t.size, t.size, flip, t.mean, t.std, out);
}

}  // namespace

DataError bad_image_error(const std::string& name, const std::string& reason) {
  return DataError(fmt::format("bad image {}: {}", name, reason),
                   "replace or delete the file, or set data.on_bad_image = \"skip\" to train without it");
}

// --- the Source ---
ImageFileSource::ImageFileSource(std::shared_ptr<const EncodedImages> images, ImageTransform t,
                                 std::shared_ptr<DecodePool> pool, std::uint64_t seed, bool skip_bad,
                                 bool channels_last, std::string description)
    : images_(std::move(images)),
      t_(t),
      pool_(std::move(pool)),
      seed_(seed),
      skip_bad_(skip_bad),
      channels_last_(channels_last),
      description_(std::move(description)) {}

Example ImageFileSource::get_epoch_batch(const torch::Tensor& indices, std::int64_t epoch) const {
  auto idx = indices.to(torch::kCPU).contiguous();
  const std::int64_t n = idx.numel(), plane = 3 * t_.size * t_.size;
  const auto* ip = idx.data_ptr<std::int64_t>();
  auto x = torch::empty({n, 3, t_.size, t_.size}, torch::kFloat32);
  auto y = torch::empty({n}, torch::kInt64);
  float* xp = x.data_ptr<float>();
  auto* yp = y.data_ptr<std::int64_t>();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::vector<std::uint8_t>> buffers(static_cast<std::size_t>(pool_->threads()));
  pool_->run(n, [&](std::int64_t i, int thread) {
    try {
      yp[i] = images_->label(ip[i]);
      decode_sample(*images_, ip[i], t_, seed_, epoch, buffers[static_cast<std::size_t>(thread)], xp + i * plane);
    } catch (...) {
      errors[static_cast<std::size_t>(i)] = std::current_exception();
    }
  });
  std::vector<std::int64_t> keep;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!errors[static_cast<std::size_t>(i)]) {
      keep.push_back(i);
      continue;
    }
    std::string reason;
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(i)]);
    } catch (const std::exception& e) {
      reason = e.what();
    }
    const std::string name = images_->name(ip[i]);
    if (!skip_bad_) throw bad_image_error(name, reason);
    note_skipped(name, fmt::format("{}: {}", name, reason));
  }
  if (static_cast<std::int64_t>(keep.size()) < n) {  // skipped: the batch is that much smaller
    auto k = torch::tensor(keep, torch::kInt64);
    x = x.index_select(0, k);
    y = y.index_select(0, k);
  }
  if (channels_last_) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  return {x, y};
}

std::vector<std::int32_t> ImageFileSource::stream_groups() const {
  std::vector<std::int32_t> g(static_cast<std::size_t>(images_->size()));
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = images_->stream(static_cast<std::int64_t>(i));
  if (!g.empty() && g.front() < 0) return {};  // image files: no streams
  return g;
}

SkippedSamples ImageFileSource::skipped() const {
  std::lock_guard<std::mutex> lk(g_skip_mu);
  return g_skipped;
}

// --- the splits ---

ImageTransform transform_of(const DataConfig& c, bool train) {
  ImageTransform t;
  t.train = train;
  t.size = static_cast<int>(c.image_size);
  t.resize = c.resize_size > 0 ? static_cast<int>(c.resize_size)
                               : static_cast<int>(std::lround(static_cast<double>(c.image_size) / 0.875));
  t.scale_lo = c.crop_scale[0], t.scale_hi = c.crop_scale[1];
  t.ratio_lo = c.crop_ratio[0], t.ratio_hi = c.crop_ratio[1];
  t.hflip = c.hflip;
  for (int ch = 0; ch < 3; ++ch) {
    t.mean[ch] = static_cast<float>(c.norm_mean[static_cast<std::size_t>(ch)]);
    t.std[ch] = static_cast<float>(c.norm_std[static_cast<std::size_t>(ch)]);
  }
  return t;
}

int decode_threads(const DataConfig& c) {
  if (c.workers > 0) return static_cast<int>(c.workers);
  // This rank's share of the machine's cores (LOCAL_WORLD_SIZE ranks share it), at least one.
  const auto lws = process_env()("LOCAL_WORLD_SIZE");
  const long long ranks = lws ? parse_integer(*lws).value_or(1) : 1;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency() / std::max(1LL, ranks)));
}

namespace {

// Some of another EncodedImages' samples, in a given order (a val split, data.limit).
class Subset : public EncodedImages {
 public:
  Subset(std::shared_ptr<const EncodedImages> base, std::vector<std::int64_t> idx)
      : base_(std::move(base)), idx_(std::move(idx)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(idx_.size()); }
  std::int32_t label(std::int64_t i) const override { return base_->label(at(i)); }
  std::string name(std::int64_t i) const override { return base_->name(at(i)); }
  void read(std::int64_t i, std::vector<std::uint8_t>& out) const override { base_->read(at(i), out); }
  std::int32_t stream(std::int64_t i) const override { return base_->stream(at(i)); }

 private:
  std::int64_t at(std::int64_t i) const { return idx_[static_cast<std::size_t>(i)]; }
  std::shared_ptr<const EncodedImages> base_;
  std::vector<std::int64_t> idx_;
};

struct Listed {
  std::shared_ptr<const EncodedImages> images;
  std::vector<std::string> classes;  // folders: the class names; shards: empty
  std::int64_t label_count = 0;      // classes, or the largest label + 1
  std::string what;                  // "2000 images in 10 classes"
};

Listed list_folder(const std::string& root, std::string_view setting) {
  auto images = std::make_shared<const FolderImages>(list_image_folder(root, setting));
  const ImageFolderListing& l = images->listing();
  Listed out;
  out.classes = l.classes;
  out.label_count = static_cast<std::int64_t>(l.classes.size());
  out.what = fmt::format("{} images in {} classes", l.size(), l.classes.size());
  if (l.skipped_hidden + l.skipped_other > 0)
    out.what += fmt::format(" ({} hidden and {} other files skipped)", l.skipped_hidden, l.skipped_other);
  out.images = std::move(images);
  return out;
}

Listed list_shards(const std::string& pattern) {
  Listed out;
  auto im = index_shards(pattern);
  for (std::int64_t i = 0; i < im->size(); ++i)
    out.label_count = std::max<std::int64_t>(out.label_count, im->label(i) + 1);
  out.what = fmt::format("{} samples", im->size());
  out.images = std::move(im);
  return out;
}

}  // namespace

std::shared_ptr<const EncodedImages> open_images(const DataConfig& c, const std::string& where) {
  return (c.dataset == "imagefolder" ? list_folder(where, "data.path") : list_shards(where)).images;
}

Splits load_image_splits(const DataConfig& c, std::uint64_t seed) {
  const bool folder = c.dataset == "imagefolder";
  const auto list = [&](const std::string& where, std::string_view setting) {
    return folder ? list_folder(where, setting) : list_shards(where);
  };
  Listed train = list(c.path, "data.path"), val;
  std::int64_t classes = train.label_count;
  if (!c.val_path.empty()) {
    val = list(c.val_path, "data.val_path");
    if (folder && val.classes != train.classes)
      throw DataError(fmt::format("data.val_path {} has other class folders than data.path {} ({} vs {} classes)",
                                  c.val_path, c.path, val.classes.size(), train.classes.size()),
                      "give both trees the same class folders, or drop data.val_path to split data.path");
    classes = std::max(classes, val.label_count);
  } else if (c.val_fraction > 0) {  // a seeded split of the training data
    auto [tr, va] = split_indices(train.images->size(), c.val_fraction, seed);
    // What trains is the rest: "82 of the 91 images in 10 classes", not the listing's 91.
    train.what = fmt::format("{} of the {}", tr.size(), train.what);
    val.what = fmt::format("{} held out of data.path (data.val_fraction = {})", va.size(), c.val_fraction);
    val.images = std::make_shared<Subset>(train.images, std::move(va));
    train.images = std::make_shared<Subset>(train.images, std::move(tr));
  }
  if (c.limit > 0 && c.limit < train.images->size()) {  // a seeded sample of N, in listing order
    auto pick = shuffled_indices(train.images->size(), seed ^ 0x6c696d6974ull);
    pick.resize(static_cast<std::size_t>(c.limit));
    std::sort(pick.begin(), pick.end());
    train.images = std::make_shared<Subset>(train.images, std::move(pick));
    train.what += fmt::format(", {} of them used (data.limit)", c.limit);
  }
  auto pool = std::make_shared<DecodePool>(decode_threads(c));
  const bool skip = c.on_bad_image == "skip";
  const std::string name = folder ? "image folder" : "tar shards";
  Splits s;
  s.train = std::make_shared<ImageFileSource>(train.images, transform_of(c, true), pool, seed, skip, c.channels_last,
                                              fmt::format("{} {}: {}", name, c.path, train.what));
  // Without held-out images the evaluation runs on the training images, with the eval transform.
  const bool held_out = val.images != nullptr;
  s.test = std::make_shared<ImageFileSource>(
      held_out ? val.images : train.images, transform_of(c, false), pool, seed, skip, c.channels_last,
      fmt::format("{} {}: {}", name, c.val_path.empty() ? c.path : c.val_path, held_out ? val.what : train.what));
  if (held_out) s.val = s.test;
  s.sample_shape = {3, c.image_size, c.image_size};
  s.classes = classes;
  s.description = fmt::format("{} ({}): train {}{}, {}×{} crops, {} decode thread{}", c.path, c.dataset, train.what,
                              held_out ? ", val " + val.what : std::string(), c.image_size, c.image_size,
                              pool->threads(), pool->threads() == 1 ? "" : "s");
  for (int ch = 0; ch < 3; ++ch) {
    s.input_mean.push_back(static_cast<float>(c.norm_mean[static_cast<std::size_t>(ch)]));
    s.input_std.push_back(static_cast<float>(c.norm_std[static_cast<std::size_t>(ch)]));
  }
  return s;
}

}  // namespace trainbox::data
