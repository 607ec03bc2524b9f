// bench allreduce_compressed: what dist.grad_compression gains on this link before training —
// one synchronised gradient exchange of a model-shaped set of gradients (the GPT's parameters)
// through the trainer's own DDP, per method: none (fp32), fp16, bf16, and PowerSGD at each
// rank asked for (--sizes; default 1 2 4). Each timed iteration is one backward whose gradients
// are fixed tensors (loss = Σ p·c, so ∂loss/∂p = c), so the time is DDP's bucketing, its
// compression and the collectives — what a training step spends on communication when nothing
// overlaps it. Bytes are the process group's own count (ProcessGroup::CommStats, ring model)
// next to the compress module's estimate for these shapes (distributed/compression.h). Every
// rank runs it. The correctness pass is apart from the timed loop: the exchanged gradient
// against the exact average, as a relative error (fp16/bf16 must be within 1e-2; PowerSGD's is
// reported: it is a low-rank approximation, corrected over steps by error feedback).
#include <trainbox/bench/bench.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/distributed/compression.h>
#include <trainbox/distributed/ddp.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/models/models.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::bench {
namespace {

std::vector<std::string> method_names() {
  std::vector<std::string> out;
  for (int m = 0; m < dist::kCompressionMethodCount; ++m)
    out.emplace_back(dist::compression_method_name(static_cast<dist::CompressionMethod>(m)));
  return out;
}

// The model whose gradient shapes are exchanged: the GPT of configs/text_gpt.toml (4 layers of
// 128, 0.8M parameters) with --quick, else one of 6 layers of 512 (19M parameters, 76 MB of fp32
// gradient: the size the slow-link benchmark trains, bench/compression_link.sh).
models::ModelConfig model_for(bool quick) {
  models::ModelConfig m;
  m.name = "gpt";
  if (!quick) {
    m.n_layer = 6;
    m.n_embd = 512;
    m.n_head = 8;
  }
  return m;
}

}  // namespace

BenchReport bench_allreduce_compressed(const BenchOptions& o) {
  if (!o.group || !o.shared_group) throw SystemError("bench allreduce_compressed needs the job's process group");
  dist::ProcessGroup& pg = *o.group;
  const int n = pg.size(), rank = pg.rank();
  const std::vector<std::string> methods = o.dtypes.empty() ? method_names() : o.dtypes;
  std::vector<std::int64_t> ranks = sizes_or(o, {1, 4}, {1, 2, 4});
  for (const auto& m : methods) dist::parse_compression_method(m);  // ConfigError naming the choices
  for (const auto r : ranks)
    if (r < 1) throw UsageError(fmt::format("--sizes {}: a PowerSGD rank is >= 1", r), "e.g. --sizes 1 2 4");
  const models::ModelConfig mc = model_for(o.quick);
  auto model = models::make_model(mc, {}, 256);
  model->to(o.device);
  std::vector<std::vector<std::int64_t>> shapes;
  std::int64_t numel = 0;
  for (const auto& p : model->parameters())
    if (p.requires_grad()) shapes.push_back(p.sizes().vec()), numel += p.numel();

  BenchReport r("allreduce_compressed", o.live);
  describe_run(r, o.device);
  r.header("backend", fmt::format("{}, {} ranks", pg.backend_name(), n));
  r.header("model", fmt::format("gpt n_layer {} n_embd {} vocab 256: {} gradients, {} parameters, {} fp32", mc.n_layer,
                                mc.n_embd, shapes.size(), numel, human_bytes(std::uint64_t(numel) * 4)));
  r.header("parameters",
           fmt::format("-n {} -w {}; powersgd from its 3rd step (start_step 2), error feedback, warm start", o.iters,
                       std::max(o.warmup, 3)));
  r.header("bytes",
           "sent per rank per step by the ring model (ProcessGroup's count); est_ratio: distributed/compression.h");
  r.header("speedup", "the none row's time / this row's; times are rank 0's median");
  r.columns({"method", "rank", "sent_bytes", "ratio", "est_ratio", "time_us", "speedup", "rel_error"});

  // Each rank's gradient: c·(rank+1), so the exact average is c·(n+1)/2.
  std::vector<torch::Tensor> params, coeffs;
  torch::manual_seed(1);
  for (const auto& p : model->parameters())
    if (p.requires_grad()) {
      params.push_back(p);
      coeffs.push_back(torch::randn(p.sizes(), p.options()) * double(rank + 1));
    }
  double none_time = 0;
  bool failed_check = false;
  for (const auto& name : methods) {
    dist::CompressionOptions c;
    c.method = dist::parse_compression_method(name);
    c.start_step = 2;
    const bool powersgd = c.method == dist::CompressionMethod::kPowerSgd;
    for (const std::int64_t prank : powersgd ? ranks : std::vector<std::int64_t>{0}) {
      if (powersgd) c.rank = prank;
      dist::check_compression_options(c);
      dist::check_compression_for_shapes(c, shapes);
      dist::DdpOptions d;
      d.compression = c;
      d.broadcast_buffers = false;
      dist::DistributedDataParallel ddp(model, o.shared_group, d);
      auto step = [&] {
        for (auto& p : params) p.mutable_grad() = torch::Tensor();
        torch::Tensor loss = torch::zeros({}, params[0].options());
        for (std::size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * coeffs[i]).sum();
        loss.backward();
      };
      const int warmup = std::max(o.warmup, 3);  // powersgd compresses from its 3rd synchronised step
      for (int i = 0; i < warmup; ++i) step();
      pg.take_comm_stats();
      Stats t = time_op(step, o.device, 0, o.iters);
      const dist::CommStats cs = pg.take_comm_stats();
      const double sent = double(cs.sent_bytes) / o.iters;
      const double fp32 = pg.allreduce_ring_factor() * 4.0 * double(numel);
      // --- correctness pass: the exchanged gradient against the exact average ---
      step();
      double err2 = 0, ref2 = 0;
      for (std::size_t i = 0; i < params.size(); ++i) {
        auto exact = coeffs[i] / double(rank + 1) * (double(n) + 1) / 2;
        err2 += (params[i].grad() - exact).pow(2).sum().item<double>();
        ref2 += exact.pow(2).sum().item<double>();
      }
      const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
      if ((c.method == dist::CompressionMethod::kFp16 || c.method == dist::CompressionMethod::kBf16) && rel > 1e-2) {
        failed_check = true;
        r.fail(fmt::format("{}: exchanged gradient {:.3g} from the exact average (over 1e-2)", name, rel));
      }
      if (c.method == dist::CompressionMethod::kNone) none_time = t.median;
      const double est = dist::estimate_compression(shapes, c).ratio();
      r.add({name, powersgd ? nlohmann::json(prank) : nlohmann::json("-"), sent, sent > 0 ? fp32 / sent : 0.0, est,
             t.median * 1e6, none_time > 0 ? nlohmann::json(none_time / t.median) : nlohmann::json("-"), rel});
    }
  }
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  r.footer(
      fmt::format("# Correctness (fp16/bf16 within 1e-2 of the exact average): {}", failed_check ? "FAILED" : "OK"));
  return r;
}

extern const BenchPlugin kAllreduceCompressedBench{
    "allreduce_compressed",
    "one DDP gradient exchange of a GPT's gradients per dist.grad_compression method (every rank runs it)",
    true,
    bench_allreduce_compressed,
    "powersgd ranks (1 4; full: 1 2 4)",
    method_names};

}  // namespace trainbox::bench
