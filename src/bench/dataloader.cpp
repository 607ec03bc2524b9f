// bench dataloader: the input pipeline alone (gather, convert, normalise, copy to the
// device), so users see when input — not the model — is the bottleneck.
#include <trainbox/bench/bench.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/data/loader.h>

namespace trainbox::bench {

BenchReport bench_dataloader(const BenchOptions& o) {
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
