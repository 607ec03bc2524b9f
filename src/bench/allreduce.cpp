// bench allreduce: nccl-tests' all_reduce_perf table over c10d (NCCL on GPU, Gloo on CPU).
// c10d's allreduce works in place; the out-of-place columns time a copy of the send
// buffer into a separate receive buffer plus the in-place allreduce of that buffer.
#include <trainbox/bench/bench.h>

#include <cstdlib>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/distributed/process_group.h>
#include <trainbox/env/nccl_log.h>
#include <trainbox/util/errors.h>

namespace trainbox::bench {

std::int64_t count_wrong(const torch::Tensor& got, const torch::Tensor& expected, double tol) {
  auto g = got.to(torch::kCPU, torch::kFloat64), e = expected.to(torch::kCPU, torch::kFloat64);
  return ((g - e).abs() > tol * e.abs().clamp_min(1.0)).sum().item<std::int64_t>();
}

BenchReport bench_allreduce(const AllreduceOptions& o, dist::ProcessGroup& pg, const torch::Device& device) {
  if (o.min_bytes <= 0 || o.max_bytes < o.min_bytes || o.factor <= 1)
    throw UsageError(
        fmt::format("allreduce sizes -b {} -e {} -f {}: need 0 < b <= e and f > 1", o.min_bytes, o.max_bytes, o.factor),
        "give the smallest size with -b and the largest with -e, e.g. -b 8 -e 128M -f 2");
  const int n = pg.size(), rank = pg.rank();
  const auto elem = static_cast<std::int64_t>(c10::elementSize(o.dtype));
  BenchReport r("allreduce");
  describe_run(r, device);
  r.header("backend", fmt::format("{}, {} ranks", pg.backend_name(), n));
  r.header("parameters", fmt::format("-b {} -e {} -f {} -n {} -w {} -c {}", o.min_bytes, o.max_bytes, o.factor, o.iters,
                                     o.warmup, o.check ? 1 : 0));
  r.header("busbw", "algbw * 2(n-1)/n (nccl-tests); times are rank 0's median");
  r.columns({"size", "count", "type", "redop", "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong", "ip_time_us",
             "ip_algbw", "ip_busbw", "ip_wrong"});
  // Test-only fault injection (TRAINBOX_BENCH_FAULT=allreduce): rank 0 corrupts one result
  // element before the check, which must then report it.
  const bool fault =
      std::getenv("TRAINBOX_BENCH_FAULT") && std::string(std::getenv("TRAINBOX_BENCH_FAULT")) == "allreduce";
  double busbw_sum = 0;
  int rows = 0;
  std::int64_t wrong_total = 0;
  const char* type = o.dtype == torch::kFloat32    ? "float"
                     : o.dtype == torch::kFloat16  ? "half"
                     : o.dtype == torch::kBFloat16 ? "bfloat16"
                                                   : "double";
  for (double bytes = double(o.min_bytes); bytes <= double(o.max_bytes) + 0.5; bytes *= o.factor) {
    const std::int64_t count = std::max<std::int64_t>(1, std::int64_t(bytes) / elem), size = count * elem;
    auto opts = torch::TensorOptions().device(device).dtype(o.dtype);
    // Each rank contributes (rank+1)·x: the sum is x·n(n+1)/2, exactly representable for small x.
    auto pattern = torch::arange(count, opts).remainder(13).add_(1);
    auto send = pattern * double(rank + 1), recv = torch::empty_like(send);
    auto expected = pattern * (double(n) * (n + 1) / 2);
    auto run = [&](torch::Tensor& t) { pg.allreduce(t, /*average=*/false); };
    Stats oop = time_op(
        [&] {
          recv.copy_(send);
          run(recv);
        },
        device, o.warmup, o.iters);
    auto ip_buf = send.clone();
    Stats ip = time_op([&] { run(ip_buf); }, device, o.warmup, o.iters);
    std::int64_t oop_wrong = -1, ip_wrong = -1;
    if (o.check) {  // --- correctness pass, apart from the timed loops ---
      recv.copy_(send);
      run(recv);
      auto fresh = send.clone();
      run(fresh);
      if (fault && rank == 0) recv.view({-1})[count / 2] += 1;
      const double tol = o.dtype == torch::kFloat32 || o.dtype == torch::kFloat64 ? 1e-6 : 1e-2;
      oop_wrong = count_wrong(recv, expected, tol);
      ip_wrong = count_wrong(fresh, expected, tol);
      wrong_total += oop_wrong + ip_wrong;
    }
    const double ip_bus = busbw_gbps(Collective::kAllReduce, double(size), ip.median, n);
    busbw_sum += ip_bus;
    ++rows;
    r.add({size, count, type, "sum", oop.median * 1e6, algbw_gbps(double(size), oop.median),
           busbw_gbps(Collective::kAllReduce, double(size), oop.median, n), oop_wrong, ip.median * 1e6,
           algbw_gbps(double(size), ip.median), ip_bus, ip_wrong});
  }
  // --- the transport, as nccl-tests users read it from NCCL_DEBUG=INFO ---
  if (o.nccl_log) {
    const env::NcclTransport t = env::parse_nccl_log(o.nccl_log->text());
    r.header("transport",
             n == 1 && env::transport_kind(t).empty()
                 ? std::string("one rank: NCCL connects no peer (P2P/SHM within a node, NET between nodes)")
                 : env::transport_summary(t));
  } else if (!device.is_cuda()) {
    r.header("transport", "Gloo over TCP (CPU)");
  }
  r.footer(fmt::format("# Out of bounds values : {} {}", wrong_total, wrong_total ? "FAILED" : "OK"));
  r.footer(fmt::format("# Avg bus bandwidth    : {:.3f}", rows ? busbw_sum / rows : 0.0));
  if (wrong_total) r.fail(fmt::format("{} allreduce result values out of bounds", wrong_total));
  return r;
}

extern const BenchPlugin kAllreduceBench{
    "allreduce", "nccl-tests' all_reduce_perf over c10d (every rank runs it)", true,
    [](const BenchOptions& o) { return bench_allreduce(o.allreduce, *o.group, o.device); }};

}  // namespace trainbox::bench
