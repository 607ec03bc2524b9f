#include "compression_state.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/io/durable_file.h>
#include <trainbox/util/errors.h>

namespace trainbox::train {

dist::CompressionOptions compression_options(const DistConfig& d) {
  dist::CompressionOptions c;
  c.method = dist::parse_compression_method(d.grad_compression);
  c.rank = d.powersgd_rank;
  c.start_step = d.powersgd_start_step;
  c.min_compression_rate = d.powersgd_min_compression_rate;
  c.error_feedback = d.powersgd_error_feedback;
  c.warm_start = d.powersgd_warm_start;
  dist::check_compression_options(c);
  return c;
}

std::vector<std::string> gradient_exchange_notes(const DistConfig& d, int world, bool has_group, std::int64_t steps) {
  const dist::CompressionOptions c = compression_options(d);
  const bool compressed = c.method != dist::CompressionMethod::kNone;
  if (!compressed && d.zero_stage == 0) return {};
  if (!has_group)  // dist.zero_stage's own note says it for the stage (trainer.cpp, note_zero_stage)
    return compressed ? std::vector<std::string>{fmt::format(
                            "note: dist.grad_compression = {} does nothing in a single process: there is no gradient "
                            "exchange (run it under trainbox run or --nproc-per-node N)",
                            d.grad_compression)}
                      : std::vector<std::string>{};
  std::vector<std::string> out = {
      fmt::format("gradient exchange: {} rank{}, dist.zero_stage = {}, "
                  "dist.grad_compression = {}",
                  world, world == 1 ? "" : "s", d.zero_stage, dist::describe_compression(c))};
  if (c.method == dist::CompressionMethod::kPowerSgd && c.start_step >= steps)
    out.push_back(fmt::format(
        "note: dist.powersgd.start_step = {} is not before this run's last step ({}): PowerSGD never starts, and "
        "every step all-reduces fp32 gradients (set dist.powersgd.start_step below {}; about 10 % of the steps is "
        "advised)",
        c.start_step, steps, steps));
  if (compressed && (d.zero_stage == 1 || d.zero_stage == 2))
    out.push_back(fmt::format(
        "note: dist.zero_stage = {} all-gathers the updated fp32 parameters after every step, half of what fp32 "
        "DDP sends, uncompressed: the whole exchange sends at most 2x fewer bytes than fp32 DDP ({}: {})",
        d.zero_stage, d.grad_compression,
        c.method == dist::CompressionMethod::kPowerSgd ? "under 2x"
                                                       : "1.33x, a 16-bit reduce-scatter and the all-gather"));
  return out;
}

CompressionEntries gather_compression_state(dist::DistributedDataParallel& ddp) {
  if (ddp.compression().method == dist::CompressionMethod::kNone) return {};
  torch::NoGradGuard ng;
  auto& pg = ddp.process_group();
  const int n = pg.size();
  const auto device = ddp.parameters().front().device();
  CompressionEntries out;
  // Every rank holds the same keys and shapes (the same buckets, the same steps): one
  // all-gather per tensor, so at most world × one bucket is in flight at a time.
  for (const auto& [key, t] : ddp.compression_state()) {
    auto in = t.to(device).reshape({-1}).clone();
    auto all = torch::empty({in.numel() * n}, in.options());
    pg.wait(pg.allgather_async(all, in), "the gradient compression state's all-gather for a checkpoint");
    if (pg.rank() != 0) continue;
    auto host = all.cpu();
    for (int r = 0; r < n; ++r)
      out.emplace_back(fmt::format("rank{}.{}", r, key),
                       host.narrow(0, r * in.numel(), in.numel()).view(t.sizes()).clone());
  }
  if (pg.rank() == 0) out.emplace_back("world_size", torch::tensor(std::int64_t(n), torch::kInt64));
  return out;
}

void write_compression_state(const std::string& dir, const CompressionEntries& entries) {
  if (entries.empty()) return;
  torch::serialize::OutputArchive ar;
  for (const auto& [k, t] : entries) ar.write(k, t, /*is_buffer=*/true);
  io::DurableFile f(dir + "/" + kCompressionStateFile);  // a full disk is reported, not an abort
  ar.save_to([&](const void* p, std::size_t len) { return f.write(p, len); });
  f.close();
}

std::optional<std::string> load_compression_state(const std::string& checkpoint_dir, dist::DistributedDataParallel& ddp,
                                                  std::int64_t step) {
  if (ddp.compression().method == dist::CompressionMethod::kNone) return std::nullopt;
  const std::string path = checkpoint_dir + "/" + kCompressionStateFile;
  const int world = ddp.process_group().size(), rank = ddp.process_group().rank();
  if (!std::filesystem::exists(path)) {
    ddp.reset_compression_state(step);
    return fmt::format(
        "note: checkpoint {} holds no gradient compression state: {} starts afresh, counting its "
        "steps from step {}",
        checkpoint_dir, dist::describe_compression(ddp.compression()), step);
  }
  torch::serialize::InputArchive ar;
  CompressionEntries mine;
  std::int64_t saved_world = 0, iteration = step;
  try {
    ar.load_from(path);
    // A fresh tensor per key: InputArchive::read into a defined tensor set_()s it in place,
    // which fails on a loaded storage and would alias the entries already taken.
    auto read = [&](const std::string& key) {
      torch::Tensor t;
      ar.read(key, t, /*is_buffer=*/true);
      return t;
    };
    saved_world = read("world_size").item<std::int64_t>();
    iteration = read("rank0.iteration").item<std::int64_t>();
    if (saved_world == world) {
      const std::string prefix = fmt::format("rank{}.", rank);
      for (const auto& k : ar.keys())
        if (k.rfind(prefix, 0) == 0) mine.emplace_back(k.substr(prefix.size()), read(k));
    }
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw DataError(fmt::format("checkpoint file {} cannot be read: {}", path, what.substr(0, what.find('\n'))),
                    "resume from an earlier checkpoint (--resume <run_dir>/checkpoints/step_N)");
  }
  if (saved_world != world) {
    ddp.reset_compression_state(iteration);
    return fmt::format(
        "note: the gradient compression state of checkpoint {} is for {} ranks, this job has {}: "
        "PowerSGD's error feedback and warm-start Q start afresh",
        checkpoint_dir, saved_world, world);
  }
  ddp.load_compression_state(mine);
  return std::nullopt;
}

}  // namespace trainbox::train
