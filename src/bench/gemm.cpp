// bench gemm: TFLOP/s per dtype over a size sweep, on random data (never zeros: zeros run
// faster on some GPUs), each dtype checked once against a float64 reference at a small size.
#include <trainbox/bench/bench.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

namespace trainbox::bench {
namespace {

struct DType {
  std::string name;
  torch::ScalarType type;
  bool tf32;
  double tol;  // relative error allowed against float64 (accumulation precision of the dtype)
};

const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> k = {{"fp32", torch::kFloat32, false, 1e-4},
                                       {"tf32", torch::kFloat32, true, 5e-3},
                                       {"bf16", torch::kBFloat16, false, 3e-2},
                                       {"fp16", torch::kFloat16, false, 5e-3}};
  return k;
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const auto& d : all_dtypes()) names.push_back(d.name);
  return names;
}

struct TF32Guard {  // TF32 matmuls for the "tf32" row only
  bool prev;
  explicit TF32Guard(bool on) : prev(at::globalContext().allowTF32CuBLAS()) {
    at::globalContext().setAllowTF32CuBLAS(on);
  }
  ~TF32Guard() { at::globalContext().setAllowTF32CuBLAS(prev); }
};

// Max error of a product in this dtype relative to float64, on a 256³ problem.
double check_error(const DType& d, const torch::Device& dev) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto a = torch::randn({256, 256}, gen, torch::kFloat64), b = torch::randn({256, 256}, gen, torch::kFloat64);
  auto ref = torch::mm(a, b);
  TF32Guard g(d.tf32);
  auto got = torch::mm(a.to(dev, d.type), b.to(dev, d.type)).to(torch::kCPU, torch::kFloat64);
  return ((got - ref).abs().max() / ref.abs().max()).item<double>();
}

}  // namespace

BenchReport bench_gemm(const BenchOptions& o) {
  BenchReport r("gemm", o.live);
  describe_run(r, o.device);
  const std::vector<std::int64_t> sizes = o.device.is_cuda()
                                              ? sizes_or(o, {1024, 4096, 8192}, {512, 1024, 2048, 4096, 8192, 16384})
                                              : sizes_or(o, {128, 256}, {256, 512, 1024, 2048});
  // A dtype the CPU only emulates (bf16 without AVX-512 BF16: 0.001 TFLOP/s at 2048^3, minutes
  // for the sweep) is left out of the default set, and shortened to sizes up to
  // kEmulatedMaxSize when asked for by --dtypes without --sizes; a `#` line says which and why.
  constexpr std::int64_t kEmulatedMaxSize = 512;
  std::vector<DType> dtypes;
  std::vector<std::string> skipped, shortened;
  for (const auto& d : all_dtypes()) {
    const bool asked = std::find(o.dtypes.begin(), o.dtypes.end(), d.name) != o.dtypes.end();
    const bool wanted = o.dtypes.empty() ? (o.device.is_cuda() || d.name == "fp32" || d.name == "bf16") : asked;
    if (!wanted) continue;
    if (const std::string why = emulated_reason(d.name, o.device); !why.empty()) {
      if (!asked) {
        skipped.push_back(
            fmt::format("{}: {}, a product would be converted to fp32 element by element (pass "
                        "--dtypes fp32 {} to measure it anyway)",
                        d.name, why, d.name));
        continue;
      }
      if (o.sizes.empty() && sizes.back() > kEmulatedMaxSize)
        shortened.push_back(
            fmt::format("{}: {}, sizes above {} left out (--sizes to choose them)", d.name, why, kEmulatedMaxSize));
    }
    dtypes.push_back(d);
  }
  for (const auto& n : o.dtypes)
    if (std::none_of(all_dtypes().begin(), all_dtypes().end(), [&](const DType& d) { return d.name == n; }))
      throw UsageError(fmt::format("gemm dtype \"{}\" is not one of {}", n, fmt::join(dtype_names(), ", ")),
                       "pass --dtypes with those names, e.g. --dtypes fp32 bf16 (fp64 is the reference, not timed)");
  r.header("sizes", fmt::format("{}", fmt::join(sizes, " ")));
  r.header("iterations", fmt::format("{} timed after {} warm-up; random normal inputs", o.iters, o.warmup));
  if (!skipped.empty()) r.header("skipped", fmt::format("{}", fmt::join(skipped, "; ")));
  if (!shortened.empty()) r.header("shortened", fmt::format("{}", fmt::join(shortened, "; ")));
  r.columns({"dtype", "m=n=k", "time_us", "min_us", "tflops", "check"});
  bool all_ok = true;
  for (const auto& d : dtypes) {
    std::string check = "-";
    if (o.check) {  // --- correctness, apart from timing ---
      double err = check_error(d, o.device);
      bool ok = err < d.tol;
      all_ok &= ok;
      check = fmt::format("{}:{:.1e}", ok ? "ok" : "FAIL", err);
    }
    const bool emulated = !emulated_reason(d.name, o.device).empty() && o.sizes.empty();
    for (auto n : sizes) {
      if (emulated && n > kEmulatedMaxSize) continue;
      auto a = torch::randn({n, n}, torch::TensorOptions().device(o.device).dtype(d.type));
      auto b = torch::randn({n, n}, torch::TensorOptions().device(o.device).dtype(d.type));
      auto c = torch::empty({n, n}, a.options());
      TF32Guard g(d.tf32);
      int iters = o.iters;
      if (!o.device.is_cuda() && n >= 2048) iters = std::max(3, iters / 4);  // CPU: keep big sizes affordable
      Stats st = time_op([&] { torch::mm_out(c, a, b); }, o.device, o.warmup, iters);
      r.add({d.name, n, st.median * 1e6, st.min * 1e6, tflops_gemm(n, n, n, st.median), check});
    }
  }
  if (!all_ok) r.fail("a dtype's product differs from the float64 reference beyond its tolerance");
  return r;
}

extern const BenchPlugin kGemmBench{
    "gemm",         "TFLOP/s of square matrix products per dtype, checked against float64",
    false,          bench_gemm,
    "square sizes", dtype_names};

}  // namespace trainbox::bench
