// bench attention: causal self-attention of the built-in GPT's geometry (4 heads of 32,
// 2048 tokens per batch) over a sweep of sequence lengths: trainbox's CPU kernel against
// ATen's scaled_dot_product_attention, forward alone and forward + backward, with the two
// checked against each other (outputs and input gradients) apart from the timing.
#include <trainbox/bench/bench.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/models/attention.h>

namespace trainbox::bench {
namespace {

constexpr std::int64_t kHeads = 4, kHeadDim = 32, kTokens = 2048;

using Attention = torch::Tensor (*)(const torch::Tensor&, std::int64_t, double);

struct Impl {
  const char* name;
  Attention fn;
};

// Largest relative difference of the two implementations' outputs and d(qkv).
double max_difference(const torch::Tensor& qkv, const torch::Tensor& grad) {
  double worst = 0;
  std::vector<torch::Tensor> got[2];
  int i = 0;
  for (Attention fn : {&models::causal_self_attention, &models::sdpa_causal_self_attention}) {
    auto in = qkv.detach().clone().requires_grad_(true);
    auto out = fn(in, kHeads, 0.0);
    out.backward(grad);
    got[i++] = {out.detach(), in.grad()};
  }
  for (int k = 0; k < 2; ++k)
    worst = std::max(worst, ((got[0][k] - got[1][k]).abs().max() / got[1][k].abs().max()).item<double>());
  return worst;
}

}  // namespace

BenchReport bench_attention(const BenchOptions& o) {
  BenchReport r("attention", o.live);
  describe_run(r, o.device);
  const std::vector<std::int64_t> lengths = sizes_or(o, {128}, {64, 128, 256, 512});
  r.header("shape", fmt::format("{} heads of {}, {} tokens per batch (batch = {} / seq_len), fp32, causal", kHeads,
                                kHeadDim, kTokens, kTokens));
  r.header("lengths", fmt::format("{}", fmt::join(lengths, " ")));
  r.header("iterations", fmt::format("{} timed after {} warm-up", o.iters, o.warmup));
  r.columns({"impl", "seq_len", "batch", "fwd_us", "fwd_bwd_us", "speedup", "check"});
  bool all_ok = true;
  for (auto T : lengths) {
    const auto B = std::max<std::int64_t>(1, kTokens / T);
    auto opts = torch::TensorOptions().device(o.device).dtype(torch::kFloat32);
    auto qkv = torch::randn({B, T, 3 * kHeads * kHeadDim}, opts);
    auto grad = torch::randn({B, T, kHeads * kHeadDim}, opts);
    const bool kernel = models::uses_cpu_attention_kernel(qkv, kHeads, 0.0);
    std::string check = "-";
    if (o.check && kernel) {  // --- correctness, apart from timing ---
      const double diff = max_difference(qkv, grad);
      const bool ok = diff < 1e-4;
      all_ok &= ok;
      check = fmt::format("{}:{:.1e}", ok ? "ok" : "FAIL", diff);
    }
    double aten_us = 0;
    for (const Impl& impl :
         {Impl{"aten-sdpa", &models::sdpa_causal_self_attention}, Impl{"trainbox", &models::causal_self_attention}}) {
      if (impl.fn == &models::causal_self_attention && !kernel) continue;  // it would time ATen again
      Stats fwd = time_op(
          [&] {
            torch::NoGradGuard no_grad;
            impl.fn(qkv, kHeads, 0.0);
          },
          o.device, o.warmup, o.iters);
      auto in = qkv.detach().requires_grad_(true);
      Stats both = time_op(
          [&] {
            in.mutable_grad().reset();  // a fresh gradient each time, not an accumulation
            impl.fn(in, kHeads, 0.0).backward(grad);
          },
          o.device, o.warmup, o.iters);
      if (aten_us == 0) aten_us = both.median * 1e6;
      r.add({std::string(impl.name), T, B, fwd.median * 1e6, both.median * 1e6,
             fmt::format("{:.2f}x", aten_us / (both.median * 1e6)),
             impl.fn == &models::causal_self_attention ? check : std::string("-")});
    }
  }
  if (!all_ok) r.fail("trainbox's attention differs from ATen's beyond 1e-4");
  return r;
}

extern const BenchPlugin kAttentionBench{
    "attention", "causal self-attention, trainbox's CPU kernel vs ATen's SDPA, forward and forward+backward", false,
    bench_attention, "sequence lengths"};

}  // namespace trainbox::bench
