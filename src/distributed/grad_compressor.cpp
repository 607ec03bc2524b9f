// The DDP's gradient compressor (grad_compressor.h): bf16/fp16 casts and PowerSGD, after
// PyTorch's default_hooks.py and powerSGD_hook.py (torch 2.x), bucket by bucket.
#include "grad_compressor.h"

#include <cstring>
#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

namespace trainbox::dist {

namespace {
// PyTorch's _orthogonalize (epsilon 0) on a batch [1, n, r] in place: Gram-Schmidt for rank <= 2
// or 16-bit types, else QR (faster for more columns), the same ops so the results agree.
void orthogonalize(torch::Tensor m) {
  const std::int64_t r = m.size(2);
  if (r <= 2 || m.scalar_type() == torch::kHalf || m.scalar_type() == torch::kBFloat16) {
    for (std::int64_t i = 0; i < r; ++i) {
      auto col = m.narrow(2, i, 1);
      col.div_(at::linalg_vector_norm(col, 2, {1}, /*keepdim=*/true));
      if (i + 1 < r) {
        auto rest = m.narrow(2, i + 1, r - i - 1);
        rest.sub_(torch::sum(col * rest, {1}, /*keepdim=*/true) * col);
      }
    }
    return;
  }
  auto rr = torch::empty({m.size(0), r, r}, m.options());
  at::linalg_qr_out(m, rr, m);
}

torch::Tensor mat_view(torch::Tensor& flat, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
  return flat.narrow(0, offset, rows * cols).view({1, rows, cols});
}

// The three products of a step, with the small matrix's transpose contiguous: a gradient M
// (rows × cols) times a tall, thin [cols, r] matrix stored row-major makes BLAS stride through
// it, 4-10x slower on this CPU than the same product with its transpose packed (measured
// for 512-2048 wide matrices at rank 4; the products are what PowerSGD's compute is).
void p_from_m_q(const torch::Tensor& m, const torch::Tensor& q, torch::Tensor p) {  // P = M·Q
  torch::mm_out(p, m, q.t().contiguous().t());
}
void q_from_m_p(const torch::Tensor& m, const torch::Tensor& p, torch::Tensor q) {  // Q = Mᵀ·P
  q.copy_(torch::mm(p.t(), m).t());
}
void m_from_p_q(const torch::Tensor& p, const torch::Tensor& q, torch::Tensor m) {  // M = P·Qᵀ
  torch::mm_out(m, p, q.t().contiguous());
}

CompressionOptions from_signature(const std::int64_t* s) {
  CompressionOptions c;
  c.method = static_cast<CompressionMethod>(s[0]);
  c.rank = s[1];
  c.start_step = s[2];
  std::memcpy(&c.min_compression_rate, &s[3], sizeof(double));
  c.error_feedback = s[4] != 0;
  c.warm_start = s[5] != 0;
  c.seed = static_cast<std::uint32_t>(s[6]);
  return c;
}
}  // namespace

GradCompressor::GradCompressor(const CompressionOptions& o, ProcessGroup& pg, std::vector<BucketLayout> layout,
                               torch::Device device, bool keep_buffers)
    : o_(o), pg_(pg), device_(device), rng_(o.seed), keep_buffers_(keep_buffers) {
  check_same_on_every_rank();
  buckets_.resize(layout.size());
  if (o_.method != CompressionMethod::kPowerSgd) return;
  for (std::size_t b = 0; b < layout.size(); ++b) {
    auto& bk = buckets_[b];
    // PyTorch groups the compressed tensors by shape, in the order each shape first appears
    // (defaultdict), and lays out P and Q in that order: so do we, so the random Q agree.
    std::vector<std::pair<std::int64_t, std::int64_t>> order;  // (rows, cols) first seen first
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int64_t>> by_shape;
    for (std::size_t k = 0; k < layout[b].shapes.size(); ++k) {
      const auto& s = layout[b].shapes[k];
      std::int64_t n = 1;
      for (auto d : s) n *= d;
      if (!powersgd_compresses(s, o_)) {
        bk.plain.emplace_back(layout[b].offsets[k], n);
        continue;
      }
      const std::pair<std::int64_t, std::int64_t> rc{s[0], n / s[0]};
      if (!by_shape.count(rc)) order.push_back(rc);
      by_shape[rc].push_back(layout[b].offsets[k]);
    }
    for (const auto& rc : order)
      for (std::int64_t off : by_shape[rc]) {
        const std::int64_t r = std::min({rc.first, rc.second, o_.rank});
        bk.mats.push_back({off, rc.first, rc.second, r, bk.p_size, bk.q_size});
        bk.p_size += rc.first * r;
        bk.q_size += rc.second * r;
      }
  }
}

void GradCompressor::check_same_on_every_rank() {
  const auto sig = compression_signature(o_);
  const auto k = static_cast<std::int64_t>(sig.size());
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device_);
  auto mine = torch::tensor(sig, opts);
  auto all = torch::empty({k * pg_.size()}, opts);
  pg_.wait(pg_.allgather_async(all, mine), "the comparison of dist.grad_compression across ranks");
  auto host = all.cpu();
  const std::int64_t* v = host.data_ptr<std::int64_t>();
  std::vector<int> differ;
  for (int r = 1; r < pg_.size(); ++r)
    if (std::memcmp(v, v + r * k, sizeof(std::int64_t) * k) != 0) differ.push_back(r);
  if (differ.empty()) return;
  throw ConfigError(
      fmt::format("the ranks' gradient compression settings differ: rank 0 has {}, rank(s) {} have {} (rank {})",
                  describe_compression(from_signature(v)), fmt::join(differ, ", "),
                  describe_compression(from_signature(v + differ.front() * k)), differ.front()),
      "give every rank the same dist.grad_compression and dist.powersgd.* (the same config file)");
}

std::uint32_t GradCompressor::next_seed() {
  // numpy RandomState(seed).randint(1_000_000_000): MT19937, masked rejection sampling with
  // the smallest 2^k - 1 mask that covers 999'999'999 (numpy's legacy bounded integers).
  ++seed_draws_;
  std::uint32_t v;
  do v = static_cast<std::uint32_t>(rng_()) & 0x3FFFFFFFu;
  while (v > 999'999'999u);
  return v;
}

// --- launch: when the bucket is ready ---
void GradCompressor::launch(std::size_t b, torch::Tensor& flat, torch::Tensor& shard, bool native_rs) {
  torch::NoGradGuard ng;
  auto& bk = buckets_[b];
  const double n = pg_.size();
  bk.vanilla = o_.method == CompressionMethod::kPowerSgd && iter_ < o_.start_step;
  if (o_.method == CompressionMethod::kPowerSgd && !bk.vanilla) return launch_powersgd(bk, flat);
  if (bk.vanilla) {  // PyTorch's hook before start_powerSGD_iter: the plain average (stage 1: reduce-scattered,
                     // as without compression)
    bk.work = shard.defined() ? pg_.reduce_scatter_async(shard, flat, /*average=*/true, native_rs)
                              : pg_.allreduce_async(flat, /*average=*/true);
    return;
  }
  // fp16/bf16: divided by the world size before the cast (a sum of N values then fits where
  // each did; docs/decisions.md), all-reduced in 16 bits. One pass: the fp32 quotient is written
  // straight into the 16-bit tensor (no fp32 temporary to fault in).
  const auto type = o_.method == CompressionMethod::kFp16 ? torch::kHalf : torch::kBFloat16;
  // Stages 0 and 1 keep the 16-bit buffer between steps, as they keep their buckets: a fresh one
  // faults its pages in at every step where large blocks are mapped and unmapped (configure_process
  // at stage 2+; about 3 % of an unthrottled step of bench/compression_link.sh's GPT). Stage 2
  // frees it with its bucket.
  if (keep_buffers_ && bk.spare.defined() && bk.spare.scalar_type() == type && bk.spare.sizes().equals(flat.sizes()))
    bk.low = bk.spare;
  else
    bk.low = torch::empty(flat.sizes(), flat.options().dtype(type));
  if (keep_buffers_) bk.spare = bk.low;
  torch::div_out(bk.low, flat, torch::scalar_tensor(n, flat.options()));
  // Sharded (stages 1 and 2): the reduce-scatter, in 16 bits, as plain ZeRO reduce-scatters in
  // 32 (stage 1 all-reduced the whole 16-bit bucket before, and with the fp32 all-gather of the
  // parameters after the step sent exactly fp32 DDP's bytes).
  if (shard.defined()) {
    bk.p = torch::empty({shard.numel()}, bk.low.options());
    bk.work = pg_.reduce_scatter_async(bk.p, bk.low, /*average=*/false, native_rs);
  } else {
    bk.work = pg_.allreduce_async(bk.low, /*average=*/false);
  }
}

void GradCompressor::launch_powersgd(Bucket& bk, torch::Tensor& flat) {
  bk.grad = flat;  // shares the bucket: the result is written into it
  bk.input = flat;
  if (o_.error_feedback) {
    if (!bk.error.defined()) bk.error = torch::zeros_like(flat);
    // gradient + error feedback, into a buffer kept from step to step (a fresh one would fault
    // its pages in every step); the gradient itself is only written, at the end.
    if (!bk.spare.defined() || !bk.spare.sizes().equals(flat.sizes())) bk.spare = torch::empty_like(flat);
    bk.input_copy = bk.spare;
    torch::add_out(bk.input_copy, flat, bk.error);
    bk.input = bk.input_copy;
  }
  // The tensors sent whole, in one flat all-reduce.
  std::vector<torch::Tensor> parts;
  for (auto [off, n] : bk.plain) parts.push_back(bk.input.narrow(0, off, n));
  bk.plain_flat = parts.empty() ? torch::Tensor() : torch::cat(parts);
  // Q: kept (warm start, orthogonalised again) or drawn as PyTorch draws it.
  const bool draw = !o_.warm_start || !bk.q.defined();
  if (draw) {
    bk.q_before = torch::Tensor();
    bk.q = torch::empty({bk.q_size}, flat.options());
  } else {
    bk.q_before = bk.q.clone();  // restored if the step turns out non-finite
  }
  bk.p = torch::empty({bk.p_size}, flat.options());
  auto gen = draw ? at::make_generator<at::CPUGeneratorImpl>(next_seed()) : at::Generator();
  for (const auto& m : bk.mats) {
    auto q = bk.q.narrow(0, m.q_at, m.cols * m.rank).view({1, m.cols, m.rank});
    if (draw) q.copy_(torch::randn({1, m.cols, m.rank}, gen, torch::TensorOptions().dtype(flat.scalar_type())));
    orthogonalize(q);
  }
  for (const auto& m : bk.mats) {
    auto p = bk.p.narrow(0, m.p_at, m.rows * m.rank).view({m.rows, m.rank});
    auto q = bk.q.narrow(0, m.q_at, m.cols * m.rank).view({m.cols, m.rank});
    p_from_m_q(mat_view(bk.input, m.offset, m.rows, m.cols)[0], q, p);
  }
  if (bk.plain_flat.defined()) bk.plain_work = pg_.allreduce_async(bk.plain_flat, /*average=*/false);
  if (bk.p_size > 0) bk.p_work = pg_.allreduce_async(bk.p, /*average=*/false);
}

// --- finish: at the end of backward ---
void GradCompressor::finish(std::size_t b, torch::Tensor& flat, torch::Tensor& shard, bool native_rs,
                            const std::string& what) {
  torch::NoGradGuard ng;
  auto& bk = buckets_[b];
  if (o_.method == CompressionMethod::kPowerSgd && !bk.vanilla) {
    if (!q_phase_) {  // every bucket's Q all-reduce in flight before the first is waited for
      q_phase_ = true;
      for (std::size_t i = b; i < buckets_.size(); ++i)
        if (buckets_[i].grad.defined()) start_q(buckets_[i], what);
    }
    return finish_powersgd(bk, what);
  }
  if (!bk.work) throw DistError(fmt::format("rank {}: {} was never launched", pg_.rank(), what));
  pg_.wait(bk.work, what);
  bk.work.reset();
  if (bk.vanilla) {
    if (shard.defined())
      pg_.reduce_scatter_result(shard, flat, /*average=*/true, native_rs);
    else
      pg_.finish_average(flat);
    return;
  }
  if (shard.defined()) {
    pg_.reduce_scatter_result(bk.p, bk.low, /*average=*/false, native_rs);
    shard.copy_(bk.p);
  } else {
    flat.copy_(bk.low);
  }
  bk.low = bk.p = torch::Tensor();
}

void GradCompressor::start_q(Bucket& bk, const std::string& what) {
  const double n = pg_.size();
  if (bk.plain_work) {  // the whole tensors: their average back into the bucket
    pg_.wait(bk.plain_work, what + " (uncompressed tensors)");
    bk.plain_work.reset();
    bk.plain_flat.div_(n);
    std::int64_t at = 0;
    for (auto [off, len] : bk.plain) {
      bk.grad.narrow(0, off, len).copy_(bk.plain_flat.narrow(0, at, len));
      at += len;
    }
  }
  if (bk.p_work) {
    pg_.wait(bk.p_work, what + " (PowerSGD P)");
    bk.p_work.reset();
  }
  for (const auto& m : bk.mats) orthogonalize(bk.p.narrow(0, m.p_at, m.rows * m.rank).view({1, m.rows, m.rank}));
  for (const auto& m : bk.mats) {
    auto p = bk.p.narrow(0, m.p_at, m.rows * m.rank).view({m.rows, m.rank});
    auto q = bk.q.narrow(0, m.q_at, m.cols * m.rank).view({m.cols, m.rank});
    q_from_m_p(mat_view(bk.input, m.offset, m.rows, m.cols)[0], p, q);
  }
  if (bk.q_size > 0) bk.q_work = pg_.allreduce_async(bk.q, /*average=*/false);
}

void GradCompressor::finish_powersgd(Bucket& bk, const std::string& what) {
  if (bk.q_work) {
    pg_.wait(bk.q_work, what + " (PowerSGD Q)");
    bk.q_work.reset();
  }
  bk.q.div_(double(pg_.size()));
  for (const auto& m : bk.mats) {  // M ≈ P·Qᵀ, written over the gradient
    auto p = bk.p.narrow(0, m.p_at, m.rows * m.rank).view({m.rows, m.rank});
    auto q = bk.q.narrow(0, m.q_at, m.cols * m.rank).view({m.cols, m.rank});
    m_from_p_q(p, q, mat_view(bk.grad, m.offset, m.rows, m.cols)[0]);
  }
  // The new error feedback: what this rank put in minus what came back (PyTorch's, over the
  // whole bucket), kept only if the step is finite (end_step).
  if (o_.error_feedback) bk.input_copy.sub_(bk.grad);
  // A NaN or Inf anywhere in a rank's input reaches the all-reduced P (a sum of products of
  // every element) or the tensors sent whole, so those small tensors stand for the gradient.
  finite_.push_back(torch::isfinite(bk.p).all());
  if (bk.plain_flat.defined()) finite_.push_back(torch::isfinite(bk.plain_flat).all());
}

// --- end_step: keep the state only from a finite step; count the step ---
void GradCompressor::end_step() {
  bool finite = true;
  if (!finite_.empty()) finite = torch::stack(finite_).all().item<bool>();  // one host sync per step
  for (auto& bk : buckets_) {
    const bool compressed = o_.method == CompressionMethod::kPowerSgd && !bk.vanilla && bk.grad.defined();
    if (compressed) {
      if (finite) {
        if (o_.error_feedback) {  // the residual becomes the error feedback; the old one's buffer the spare
          std::swap(bk.error, bk.input_copy);
          bk.spare = bk.input_copy;
        }
        if (!o_.warm_start) bk.q = torch::Tensor();  // drawn afresh at every step
      } else {  // the GradScaler skips this step: the error feedback and Q stay as they were
        bk.q = bk.q_before;
      }
    }
    drop_step_tensors(bk);
  }
  finite_.clear();
  q_phase_ = false;
  ++iter_;  // as PowerSGDState.iter: every synchronised step, skipped ones too
}

void GradCompressor::drop_step_tensors(Bucket& bk) {
  bk.input_copy = bk.input = bk.q_before = bk.plain_flat = bk.p = bk.grad = bk.low = torch::Tensor();
  bk.work.reset();
  bk.plain_work.reset();
  bk.p_work.reset();
  bk.q_work.reset();
  bk.vanilla = false;
}

void GradCompressor::abort_step() {
  for (auto& bk : buckets_) {
    if (bk.q_before.defined())
      bk.q = bk.q_before;
    else if (o_.method == CompressionMethod::kPowerSgd && bk.grad.defined() && !bk.vanilla)
      bk.q = torch::Tensor();
    drop_step_tensors(bk);
  }
  finite_.clear();
  q_phase_ = false;
}

// --- state for checkpoints ---
std::vector<std::pair<std::string, torch::Tensor>> GradCompressor::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.emplace_back("iteration", torch::tensor(iter_, torch::kInt64));
  out.emplace_back("seed_draws", torch::tensor(seed_draws_, torch::kInt64));
  out.emplace_back("world_size", torch::tensor(std::int64_t(pg_.size()), torch::kInt64));
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    // Copies: Q is updated in place by the next step (on the CPU, .cpu() would be the same tensor).
    auto copy = [](const torch::Tensor& t) { return t.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true); };
    if (buckets_[b].error.defined()) out.emplace_back(fmt::format("error.{}", b), copy(buckets_[b].error));
    if (buckets_[b].q.defined()) out.emplace_back(fmt::format("q.{}", b), copy(buckets_[b].q));
  }
  return out;
}

void GradCompressor::reset_state(std::int64_t iteration) {
  for (auto& bk : buckets_) bk.error = bk.q = torch::Tensor();
  iter_ = iteration;
}

void GradCompressor::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& entries) {
  std::map<std::string, torch::Tensor> by;
  for (const auto& [k, t] : entries) by[k] = t;
  auto need = [&](const std::string& k) {
    auto it = by.find(k);
    if (it == by.end())
      throw DataError("the checkpoint's gradient compression state has no '" + k + "'",
                      "the checkpoint is damaged or from another trainbox: resume from another checkpoint");
    return it->second;
  };
  if (need("world_size").item<std::int64_t>() != pg_.size())
    throw DataError("the checkpoint's gradient compression state is for another world size",
                    "reset it instead (DistributedDataParallel::reset_compression_state)");
  reset_state(need("iteration").item<std::int64_t>());
  rng_.seed(o_.seed);
  seed_draws_ = 0;
  const std::int64_t draws = need("seed_draws").item<std::int64_t>();
  while (seed_draws_ < draws) next_seed();
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& bk = buckets_[b];
    for (auto [name, dst] : {std::pair<const char*, torch::Tensor*>{"error", &bk.error}, {"q", &bk.q}}) {
      auto it = by.find(fmt::format("{}.{}", name, b));
      if (it == by.end()) continue;
      const std::int64_t want = std::string(name) == "q" ? bk.q_size : -1;
      if (want >= 0 && it->second.numel() != want)
        throw DataError(fmt::format("the checkpoint's PowerSGD {}.{} has {} elements, this model's needs {}", name, b,
                                    it->second.numel(), want),
                        "the checkpoint belongs to another model or dist.powersgd.rank: start a new run dir");
      *dst = it->second.to(device_).clone();
    }
  }
}

}  // namespace trainbox::dist
