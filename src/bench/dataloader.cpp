// bench dataloader: the input pipeline alone (gather, convert, normalise, copy to the
// device), so users see when input — not the model — is the bottleneck. With --dataset
// imagefolder|webdataset --path: the image pipeline of docs/datasets.md, per phase on one
// thread (read, full-size decode — the bare TurboJPEG/libpng limit —, the decode of the crop
// box's region, crop + resize + normalise, and collate: what a whole batch adds), then the whole
// pipeline on its decode threads epoch after epoch, with the process's memory after each.
#include <trainbox/bench/bench.h>

#include <chrono>
#include <fstream>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/data/loader.h>

#include <trainbox/data/image/decode.h>
#include <trainbox/data/image/transform.h>
#include <trainbox/data/image_source.h>
#include <trainbox/train/run_log.h>
#include <trainbox/util/clock.h>

namespace trainbox::bench {
namespace {

namespace image = data::image;

double rss_mb() {  // resident now (VmRSS)
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

BenchReport bench_images(const BenchOptions& o) {
  BenchReport r("dataloader");
  describe_run(r, o.device);
  data::DataConfig c;
  c.dataset = o.images.dataset;
  c.path = o.images.path;
  c.image_size = o.images.image_size;
  c.workers = o.images.workers;
  double t0 = now_seconds();
  auto images = data::open_images(c, c.path);
  const double listing_s = now_seconds() - t0;
  const auto t = data::transform_of(c, /*train=*/true);
  const int threads = data::decode_threads(c);
  const std::int64_t n = images->size();
  r.header("data", fmt::format("{} {}: {} images, listed in {:.3f} s", c.dataset, c.path, n, listing_s));
  r.header("transform", fmt::format("train: RandomResizedCrop({}) + flip + normalise, float32 NCHW, batch {}", t.size,
                                    o.images.batch));
  r.columns({"stage", "threads", "images_per_s", "ms_per_image", "rss_mb"});

  // --- per phase, one thread, the first m images ---
  const std::int64_t m = std::min<std::int64_t>(n, o.quick ? 64 : 1000);
  std::vector<std::uint8_t> bytes;
  std::vector<float> out(static_cast<std::size_t>(3 * t.size * t.size));
  double read_s = 0, full_s = 0, scaled_s = 0, crop_s = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    try {
      t0 = now_seconds();
      images->read(i, bytes);
      read_s += now_seconds() - t0;
      t0 = now_seconds();
      (void)image::decode(bytes.data(), bytes.size());
      full_s += now_seconds() - t0;
      t0 = now_seconds();
      const auto h = image::read_header(bytes.data(), bytes.size());
      image::Rng rng = image::sample_rng(0, 0, i);
      const auto box =
          image::random_resized_crop_box(h.width, h.height, t.scale_lo, t.scale_hi, t.ratio_lo, t.ratio_hi, rng);
      const auto need = image::decode_size_for_crop(h.width, h.height, box, t.size, t.size);
      const auto img = image::decode(bytes.data(), bytes.size(), need.width, need.height, &box);
      scaled_s += now_seconds() - t0;
      t0 = now_seconds();
      image::resized_crop(img, box, t.size, t.size, rng.uniform(0, 1) < 0.5, t.mean, t.std, out.data());
      crop_s += now_seconds() - t0;
    } catch (const DataError& e) {  // named as training names it
      throw data::bad_image_error(images->name(i), e.what());
    }
  }
  // collate: one thread's whole batches through the Source, less the phases above
  auto one = std::make_shared<data::DecodePool>(1);
  data::ImageFileSource single(images, t, one, 0, false, false, "");
  const std::int64_t b = std::min<std::int64_t>(o.images.batch, m);
  t0 = now_seconds();
  for (std::int64_t s = 0; s + b <= m; s += b) (void)single.get_epoch_batch(torch::arange(s, s + b), 0);
  const double batch_s = (now_seconds() - t0) / double(m / b * b);
  const double per = 1.0 / double(m);
  auto phase = [&](const char* name, double sec_per_image) {
    r.add({name, 1, sec_per_image > 0 ? 1.0 / sec_per_image : 0.0, sec_per_image * 1e3, rss_mb()});
  };
  phase("read", read_s * per);
  phase("decode full size (the limit)", full_s * per);
  phase("decode the crop's region (DCT-scaled)", scaled_s * per);
  phase("crop + resize + normalise", crop_s * per);
  phase("collate (batch less the phases)", std::max(0.0, batch_s - (read_s + scaled_s + crop_s) * per));
  phase("pipeline, whole batches", batch_s);

  // --- the whole pipeline on its threads, epoch after epoch ---
  auto source = std::make_shared<data::ImageFileSource>(images, t, std::make_shared<data::DecodePool>(threads), 0,
                                                        false, false, "");
  data::LoaderOptions lo;
  lo.batch_size = o.images.batch;
  lo.device = o.device;
  data::BatchLoader loader(source, lo);
  const std::int64_t epochs = o.quick ? std::min<std::int64_t>(o.images.epochs, 2) : o.images.epochs;
  double best = 0;
  for (std::int64_t e = 0; e < epochs; ++e) {
    t0 = now_seconds();
    loader.start_epoch(e);
    std::int64_t seen = 0;
    while (auto batch = loader.next()) seen += batch->x.size(0);
    const double ips = double(seen) / (now_seconds() - t0);
    best = std::max(best, ips);
    r.add({fmt::format("pipeline epoch {}", e + 1), threads, ips, 1e3 / ips, rss_mb()});
  }
  const double limit = threads / (full_s * per);
  r.footer(
      fmt::format("# pipeline: {:.0f} images/s = {:.0f} % of bare full-size decode on {} thread{} ({:.0f} images/s)",
                  best, 100 * best / limit, threads, threads == 1 ? "" : "s", limit));
  r.footer(fmt::format("# peak RSS: {:.0f} MB", double(train::peak_memory(torch::kCPU)) / (1 << 20)));
  return r;
}

}  // namespace

BenchReport bench_dataloader(const BenchOptions& o) {
  if (!o.images.dataset.empty()) return bench_images(o);
  BenchReport r("dataloader");
  describe_run(r, o.device);
  const std::int64_t samples = o.quick ? 8192 : 60000;
  auto data = data::make_synthetic(samples, {1, 28, 28}, 10, 0);
  data::Normalization norm{{0.5f}, {0.25f}};
  r.header("data", fmt::format("{} synthetic uint8 1x28x28 samples, shuffled, normalised per batch", samples));
  r.columns({"batch", "prefetch", "device_resident", "batches_per_s", "samples_per_s", "gbps_to_device"});
  struct Row {
    std::int64_t batch, prefetch;
    bool resident;
  };
  std::vector<Row> rows = {{64, 0, false}, {64, 2, false}, {512, 0, false}, {512, 2, false}};
  if (o.device.is_cuda()) rows.push_back({512, 0, true});
  for (const auto& row : rows) {
    data::LoaderOptions lo;
    lo.batch_size = row.batch;
    lo.prefetch = row.prefetch;
    lo.device = o.device;
    lo.device_resident = row.resident;
    data::BatchLoader loader(data, norm, lo);
    const std::int64_t nb = loader.batches_per_epoch();
    int epoch = 0;
    Stats st = time_op(
        [&] {
          loader.start_epoch(epoch++);
          while (auto b = loader.next()) (void)b;
        },
        o.device, 1, o.quick ? 2 : 3);
    const double per_s = double(nb) / st.median;
    r.add({row.batch, row.prefetch, row.resident ? "yes" : "no", per_s, per_s * double(row.batch),
           per_s * double(row.batch) * 28 * 28 * 4 / 1e9});
  }
  return r;
}

extern const BenchPlugin kDataloaderBench{"dataloader", "the input pipeline alone: batches/s and GB/s to the device",
                                          false, bench_dataloader};

}  // namespace trainbox::bench
