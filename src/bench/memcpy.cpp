// bench memcpy: host→device and device→host, pageable against pinned, and device→device,
// in GB/s over a size sweep, with the pinned/pageable ratio. On CPU: host→host copies.
#include <trainbox/bench/bench.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

namespace trainbox::bench {

BenchReport bench_memcpy(const BenchOptions& o) {
  BenchReport r("memcpy", o.live);
  describe_run(r, o.device);
  const std::vector<std::int64_t> sizes =
      sizes_or(o, {1 << 20, 64 << 20}, {64 << 10, 1 << 20, 16 << 20, 256 << 20, 1LL << 30});
  r.header("bytes", fmt::format("{}", fmt::join(sizes, " ")));
  r.header("bandwidth",
           "GB/s = bytes copied / time (1 GB = 1e9 B); d2d counts each byte once (x2 = read+write traffic)");
  r.columns({"direction", "bytes", "time_us", "gbps", "pinned/pageable", "check"});
  auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
  for (auto bytes : sizes) {
    if (!o.device.is_cuda()) {
      auto src = torch::randint(0, 255, {bytes}, u8), dst = torch::empty({bytes}, u8);
      Stats st = time_op([&] { dst.copy_(src); }, o.device, o.warmup, o.iters);
      const bool same = !o.check || dst.equal(src);
      if (!same) r.fail(fmt::format("host->host copy of {} bytes changed the data", bytes));
      r.add({"host->host", bytes, st.median * 1e6, copy_gbps(double(bytes), st.median), "-",
             o.check ? (same ? "ok" : "FAIL") : "-"});
      continue;
    }
    auto pageable = torch::randint(0, 255, {bytes}, u8);
    auto pinned = pageable.pin_memory();
    auto dev = torch::empty({bytes}, u8.device(o.device)), dev2 = torch::empty({bytes}, u8.device(o.device));
    auto host_out = torch::empty({bytes}, u8), pinned_out = torch::empty({bytes}, u8).pin_memory();
    Stats h2d_page = time_op([&] { dev.copy_(pageable); }, o.device, o.warmup, o.iters);
    Stats h2d_pin = time_op([&] { dev.copy_(pinned, /*non_blocking=*/true); }, o.device, o.warmup, o.iters);
    Stats d2h_page = time_op([&] { host_out.copy_(dev); }, o.device, o.warmup, o.iters);
    Stats d2h_pin = time_op([&] { pinned_out.copy_(dev, true); }, o.device, o.warmup, o.iters);
    Stats d2d = time_op([&] { dev2.copy_(dev); }, o.device, o.warmup, o.iters);
    std::string ok = "-";
    if (o.check) {
      torch::cuda::synchronize();
      ok = host_out.equal(pageable) && pinned_out.equal(pageable) && dev2.cpu().equal(pageable) ? "ok" : "FAIL";
      if (ok == "FAIL") r.fail(fmt::format("a copy of {} bytes changed the data", bytes));
    }
    const double b = double(bytes);
    r.add({"h2d pageable", bytes, h2d_page.median * 1e6, copy_gbps(b, h2d_page.median), "-", ok});
    r.add({"h2d pinned", bytes, h2d_pin.median * 1e6, copy_gbps(b, h2d_pin.median), h2d_page.median / h2d_pin.median,
           ok});
    r.add({"d2h pageable", bytes, d2h_page.median * 1e6, copy_gbps(b, d2h_page.median), "-", ok});
    r.add({"d2h pinned", bytes, d2h_pin.median * 1e6, copy_gbps(b, d2h_pin.median), d2h_page.median / d2h_pin.median,
           ok});
    r.add({"d2d", bytes, d2d.median * 1e6, copy_gbps(b, d2d.median), "-", ok});
  }
  return r;
}

extern const BenchPlugin kMemcpyBench{"memcpy", "copy GB/s: host<->device pageable and pinned, device<->device", false,
                                      bench_memcpy, "bytes"};

}  // namespace trainbox::bench
