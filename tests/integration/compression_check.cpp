// Gradient compression checks (distributed/compression.h), run as 2 ranks by
// compression_vs_torch.py, which runs PyTorch's own hooks on the same gradients and compares.
//   compression_check dump DIR    for each configuration of kConfigs: a module whose parameters
//       have kShapes, loss = sum_k (p_k * G_k).sum() so each gradient is exactly G_k (drawn from
//       a CPU generator seeded 1000·step + 100·rank + k, as the Python side draws it), kSteps
//       synchronised backward passes; writes each step's averaged gradients
//       (DIR/<config>.rank<R>.step<S>.bin, float32, parameters in order) and the state after the
//       last step (DIR/<config>.rank<R>.<error.0|q.0>.bin). Then its own checks, printed "ok"/"FAIL":
//       resume (a new DDP loaded with the state saved after step 2 continues bit-identically),
//       NaN (a step with an inf gradient on rank 1 leaves error feedback and Q untouched and the
//       gradients non-finite on both ranks), accumulation (no_sync micro-batches do not count as
//       steps) and CommStats (the bytes counted are the estimate's).
//   compression_check mismatch    rank 1 asks for another PowerSGD rank: ConfigError naming it.
//   compression_check badrank     rank 64 > every matrix's smaller side: ConfigError.
// Exit 0 when every check holds; trainbox's exit codes otherwise.
#include <cstdio>
#include <fstream>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/distributed/compression.h>
#include <trainbox/distributed/ddp.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {
// Two matrices of one shape with others between (PyTorch groups by shape), a 4-D conv
// weight (compressed at rank 2, not at 4), a small matrix never worth compressing, biases.
const std::vector<std::vector<std::int64_t>> kShapes = {{32, 24}, {24}, {8, 4, 3, 3}, {4, 4}, {32, 24}, {40, 16}, {40}};
constexpr int kSteps = 6;  // start_step 2: steps 2..5 compressed (4 steps of carried state)

struct Named {
  std::string name;
  dist::CompressionOptions c;
};
std::vector<Named> configs() {
  using M = dist::CompressionMethod;
  dist::CompressionOptions bf16, fp16, ps2, ps4;
  bf16.method = M::kBf16;
  fp16.method = M::kFp16;
  ps2.method = ps4.method = M::kPowerSgd;
  ps2.rank = 2;  // Gram-Schmidt
  ps2.start_step = ps4.start_step = 2;
  ps4.rank = 4;  // QR; no warm start: Q drawn at every step from the numpy seed sequence
  ps4.warm_start = false;
  return {{"bf16", bf16}, {"fp16", fp16}, {"powersgd_r2", ps2}, {"powersgd_r4_cold", ps4}};
}

struct Gradients : torch::nn::Module {
  std::vector<torch::Tensor> ps;
  Gradients() {
    for (std::size_t k = 0; k < kShapes.size(); ++k)
      ps.push_back(register_parameter(fmt::format("p{}", k), torch::zeros(kShapes[k])));
  }
  torch::Tensor loss(int step, int rank, double scale = 1.0, bool poison = false) {
    torch::Tensor l = torch::zeros({});
    for (std::size_t k = 0; k < ps.size(); ++k) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(std::uint64_t(1000 * step + 100 * rank + int(k)));
      auto g = torch::randn(kShapes[k], gen) * scale;
      if (poison && k == 0) g.view({-1})[3] = std::numeric_limits<float>::infinity();
      l = l + (ps[k] * g).sum();
    }
    return l;
  }
  torch::Tensor grads() const {
    std::vector<torch::Tensor> g;
    for (const auto& p : ps) g.push_back(p.grad().reshape({-1}));
    return torch::cat(g);
  }
  void zero() {
    for (auto& p : ps) p.mutable_grad().zero_();
  }
};

void write(const std::string& path, const torch::Tensor& t) {
  auto c = t.to(torch::kFloat32).contiguous();
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(c.data_ptr()), std::streamsize(c.numel() * 4));
}

torch::Tensor state_of(const dist::DistributedDataParallel& d, const std::string& key) {
  for (const auto& [k, t] : d.compression_state())
    if (k == key) return t;
  return {};
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "dump";
  try {
    auto env = dist::WorkerEnv::from_environment();
    dist::ProcessGroupOptions po;
    po.timeout = std::chrono::seconds(60);
    auto pg = dist::ProcessGroup::init(env, po);
    const int rank = pg->rank();
    if (mode == "mismatch" || mode == "badrank") {
      dist::DdpOptions o;
      o.compression.method = dist::CompressionMethod::kPowerSgd;
      o.compression.rank = mode == "badrank" ? 64 : (rank == 1 ? 2 : 4);
      dist::DistributedDataParallel ddp(std::make_shared<Gradients>(), pg, o);
      return 0;
    }
    const std::string dir = argc > 2 ? argv[2] : ".";
    int failures = 0;
    auto expect = [&](bool ok, const std::string& what) {
      if (rank == 0) std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
      failures += !ok;
    };
    for (const auto& [name, c] : configs()) {
      auto m = std::make_shared<Gradients>();
      dist::DdpOptions o;
      o.compression = c;
      dist::DistributedDataParallel ddp(m, pg, o);
      expect(ddp.bucket_count() == 1, name + ": one bucket, as in PyTorch's DDP");
      std::vector<std::pair<std::string, torch::Tensor>> saved;
      std::vector<torch::Tensor> seen;
      for (int s = 0; s < kSteps; ++s) {
        ddp.before_forward();
        pg->take_comm_stats();
        m->loss(s, rank).backward();
        const auto stats = pg->take_comm_stats();
        if (s == kSteps - 1) {
          const auto est = dist::estimate_compression(kShapes, c);
          expect(stats.payload_bytes == est.compressed_bytes,
                 fmt::format("{}: CommStats payload {} bytes per step == the estimate {} (fp32 {}, ratio {:.2f})", name,
                             stats.payload_bytes, est.compressed_bytes, est.uncompressed_bytes, est.ratio()));
        }
        write(fmt::format("{}/{}.rank{}.step{}.bin", dir, name, rank, s), m->grads());
        seen.push_back(m->grads().clone());
        m->zero();
        if (s == 2) saved = ddp.compression_state();
      }
      for (const char* key : {"error.0", "q.0"})
        if (auto t = state_of(ddp, key); t.defined())
          write(fmt::format("{}/{}.rank{}.{}.bin", dir, name, rank, key), t);
      if (c.method != dist::CompressionMethod::kPowerSgd) continue;

      // --- resume: the state after step 2 in a new DDP continues bit-identically ---
      {
        auto m2 = std::make_shared<Gradients>();
        dist::DistributedDataParallel d2(m2, pg, o);
        d2.load_compression_state(saved);
        bool same = true;
        for (int s = 3; s < kSteps; ++s) {
          d2.before_forward();
          m2->loss(s, rank).backward();
          same = same && m2->grads().equal(seen[s]);
          m2->zero();
        }
        expect(same, name + ": a DDP resumed from the state after step 2 gives bit-identical gradients at steps 3-5");
      }
      // --- NaN: an inf on rank 1 at a compressed step leaves error feedback and Q as they were ---
      {
        auto before_e = state_of(ddp, "error.0"), before_q = state_of(ddp, "q.0");
        ddp.before_forward();
        m->loss(kSteps, rank, 1.0, /*poison=*/rank == 1).backward();
        const bool nonfinite = !m->grads().isfinite().all().item<bool>();
        m->zero();
        auto after_e = state_of(ddp, "error.0"), after_q = state_of(ddp, "q.0");
        const bool kept =
            after_e.equal(before_e) && (!before_q.defined() ? !after_q.defined() : after_q.equal(before_q));
        expect(nonfinite && kept, fmt::format("{}: an inf gradient on rank 1 reaches every rank's gradients (the "
                                              "scaler skips: {}) and leaves error feedback and Q unchanged: {}",
                                              name, nonfinite ? "yes" : "no", kept ? "yes" : "no"));
      }
      // --- accumulation: only the synchronising micro-batch counts as a step ---
      {
        const auto it0 = state_of(ddp, "iteration").item<std::int64_t>();
        ddp.before_forward();
        {
          auto guard = ddp.no_sync();
          m->loss(0, rank).backward();
        }
        ddp.before_forward();
        m->loss(1, rank).backward();
        m->zero();
        const auto it1 = state_of(ddp, "iteration").item<std::int64_t>();
        expect(it1 == it0 + 1,
               fmt::format("{}: 2 micro-batches (1 under no_sync) count as 1 step ({} -> {})", name, it0, it1));
      }
    }
    pg->barrier();
    return failures ? kExitFailed : kExitOk;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s%s%s\n", e.what(), e.hint().empty() ? "" : " — ", e.hint().c_str());
    return e.exit_code();
  }
}
