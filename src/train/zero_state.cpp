#include "zero_state.h"

#include <unordered_map>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

namespace trainbox::train {

namespace {
// For each of ddp.parameters(): its index among the module's parameters (what optimizer.pt keys by).
std::vector<std::int64_t> module_index(const dist::DistributedDataParallel& ddp,
                                       const std::vector<torch::Tensor>& module_params) {
  std::unordered_map<const void*, std::int64_t> at;
  for (std::size_t i = 0; i < module_params.size(); ++i) at[module_params[i].unsafeGetTensorImpl()] = std::int64_t(i);
  std::vector<std::int64_t> out;
  for (const auto& p : ddp.parameters()) {
    auto it = at.find(p.unsafeGetTensorImpl());
    if (it == at.end()) throw SystemError("sharded optimizer state: a DDP parameter is not one of the module's");
    out.push_back(it->second);
  }
  return out;
}

std::string key(const std::string& name, std::int64_t i) { return name + "." + std::to_string(i); }
}  // namespace

ArchiveEntries gather_optimizer_state(dist::DistributedDataParallel& ddp, const Optimizer& opt,
                                      const std::vector<torch::Tensor>& module_params) {
  torch::NoGradGuard ng;
  auto& pg = ddp.process_group();
  const bool root = pg.rank() == 0;
  const auto layout = ddp.shard_layout();
  const auto idx = module_index(ddp, module_params);
  const auto& params = ddp.parameters();
  ArchiveEntries out;
  std::vector<bool> covered(module_params.size(), false);
  for (std::int64_t i : idx) covered[i] = true;
  for (const auto& [name, shards] : opt.state()) {
    if (shards.empty()) continue;
    if (shards.size() != layout.size())
      throw SystemError(
          fmt::format("sharded optimizer state '{}': {} tensors for {} buckets", name, shards.size(), layout.size()));
    for (std::size_t b = 0; b < layout.size(); ++b) {
      const auto& L = layout[b];
      if (name == "step") {  // one count per bucket, the same on every rank: each parameter's is its bucket's
        if (root)
          for (int p : L.params) out.emplace_back(key(name, idx[p]), shards[b].clone());
        continue;
      }
      auto full = torch::empty({L.padded}, shards[b].options());
      auto in = shards[b].clone();
      pg.wait(pg.allgather_async(full, in), fmt::format("optimizer state all-gather of bucket {}", b));
      if (!root) continue;
      for (std::size_t k = 0; k < L.params.size(); ++k) {
        const auto& p = params[L.params[k]];
        out.emplace_back(key(name, idx[L.params[k]]), full.narrow(0, L.offsets[k], p.numel()).view(p.sizes()).clone());
      }
    }
    if (root)  // parameters the DDP does not train (frozen): the zeros an unsharded optimizer holds
      for (std::size_t i = 0; i < module_params.size(); ++i)
        if (!covered[i])
          out.emplace_back(key(name, std::int64_t(i)), name == "step" ? torch::zeros({}, shards.front().options())
                                                                      : torch::zeros_like(module_params[i].detach()));
  }
  if (root) out.emplace_back("lr", torch::tensor(opt.lr(), torch::kFloat64));
  return out;
}

void write_entries(torch::serialize::OutputArchive& ar, const ArchiveEntries& entries) {
  for (const auto& [k, t] : entries) ar.write(k, t, /*is_buffer=*/true);
}

void load_optimizer_shard(const dist::DistributedDataParallel& ddp, Optimizer& opt,
                          const std::vector<torch::Tensor>& module_params, torch::serialize::InputArchive& ar) {
  torch::NoGradGuard ng;
  const auto layout = ddp.shard_layout();
  const auto idx = module_index(ddp, module_params);
  const auto& params = ddp.parameters();
  auto read = [&](const std::string& k) {
    torch::Tensor t;
    ar.read(k, t, /*is_buffer=*/true);
    return t;
  };
  for (auto& [name, shards] : opt.state()) {
    if (shards.empty()) continue;
    for (std::size_t b = 0; b < layout.size(); ++b) {
      const auto& L = layout[b];
      if (name == "step") {
        shards[b].copy_(read(key(name, idx[L.params.front()])));
        continue;
      }
      shards[b].zero_();  // the padding stays zero
      const std::int64_t begin = L.shard_begin, end = L.shard_begin + L.shard_size;
      for (std::size_t k = 0; k < L.params.size(); ++k) {
        const auto& p = params[L.params[k]];
        const std::int64_t off = L.offsets[k], lo = std::max(off, begin), hi = std::min(off + p.numel(), end);
        if (lo >= hi) continue;  // another rank's slice
        const std::string kk = key(name, idx[L.params[k]]);
        auto t = read(kk);
        if (!t.sizes().equals(p.sizes()))
          throw DataError("checkpoint optimizer state " + kk + " has shape " + c10::str(t.sizes()) +
                              ", the model needs " + c10::str(p.sizes()),
                          "the checkpoint belongs to a different model or optimizer; start a new run dir");
        shards[b].narrow(0, lo - begin, hi - lo).copy_(t.reshape({-1}).narrow(0, lo - off, hi - lo));
      }
    }
  }
  opt.set_lr(read("lr").item<double>());
}

}  // namespace trainbox::train
