#include "zero_state.h"

#include <algorithm>
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

void fill_optimizer_shards(const dist::DistributedDataParallel& ddp, Optimizer& opt, const ShardStepSource& step_of,
                           const ShardRangeSource& range) {
  torch::NoGradGuard ng;
  const auto layout = ddp.shard_layout();
  const auto& params = ddp.parameters();
  for (auto& [name, shards] : opt.state()) {
    if (shards.empty()) continue;
    for (std::size_t b = 0; b < layout.size(); ++b) {
      const auto& L = layout[b];
      if (name == "step") {  // one count per bucket: its first parameter's
        shards[b].copy_(step_of(name, L.params.front()));
        continue;
      }
      shards[b].zero_();  // the padding stays zero
      const std::int64_t begin = L.shard_begin, end = L.shard_begin + L.shard_size;
      for (std::size_t k = 0; k < L.params.size(); ++k) {
        const auto& p = params[L.params[k]];
        const std::int64_t off = L.offsets[k], lo = std::max(off, begin), hi = std::min(off + p.numel(), end);
        if (lo >= hi) continue;  // another rank's slice
        shards[b].narrow(0, lo - begin, hi - lo).copy_(range(name, L.params[k], lo - off, hi - off));
      }
    }
  }
}

void load_optimizer_shard(const dist::DistributedDataParallel& ddp, Optimizer& opt,
                          const std::vector<torch::Tensor>& module_params, torch::serialize::InputArchive& ar) {
  torch::NoGradGuard ng;
  const auto idx = module_index(ddp, module_params);
  const auto& params = ddp.parameters();
  auto read = [&](const std::string& k) {
    torch::Tensor t;
    ar.read(k, t, /*is_buffer=*/true);
    return t;
  };
  fill_optimizer_shards(
      ddp, opt, [&](const std::string& name, int param) { return read(key(name, idx[param])); },
      [&](const std::string& name, int param, std::int64_t lo, std::int64_t hi) {
        const std::string kk = key(name, idx[param]);
        const auto& p = params[param];
        auto t = read(kk);
        if (!t.sizes().equals(p.sizes()))
          throw DataError("checkpoint optimizer state " + kk + " has shape " + c10::str(t.sizes()) +
                              ", the model needs " + c10::str(p.sizes()),
                          "the checkpoint belongs to a different model or optimizer; start a new run dir");
        return t.reshape({-1}).narrow(0, lo, hi - lo);
      });
  opt.set_lr(read("lr").item<double>());
}

}  // namespace trainbox::train
