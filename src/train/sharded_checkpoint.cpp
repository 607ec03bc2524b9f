#include "sharded_checkpoint.h"

#include "checkpoint_state.h"
#include "zero_state.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/io/durable_file.h>
#include <trainbox/train/checkpoint.h>
#include <trainbox/train/checkpoint_path.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {

namespace {

constexpr const char* kLayoutFormat = "trainbox-flat-buckets";
constexpr int kLayoutVersion = 1;
const char* const kFix = "resume from an earlier checkpoint (--resume <run_dir>/checkpoints/step_N), or --resume auto";

std::string params_file(std::int64_t r) { return fmt::format("rank_{}.params.pt", r); }
std::string optim_file(std::int64_t r) { return fmt::format("rank_{}.optim.pt", r); }
std::string key(const std::string& name, std::size_t b) { return name + "." + std::to_string(b); }

// Through io::DurableFile (fsync'ed, a full disk reported), as checkpoint_state.cpp writes its archives.
void save_archive(torch::serialize::OutputArchive& ar, const std::string& path) {
  io::DurableFile f(path);
  ar.save_to([&](const void* p, std::size_t n) { return f.write(p, n); });
  f.close();
}

// A damaged archive is a c10::Error from torch; name the file instead.
template <class F>
auto reading(const std::string& path, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw DataError(fmt::format("checkpoint file {} cannot be read: {}", path, what.substr(0, what.find('\n'))), kFix);
  }
}

// The manifest's "sharding" object, parsed: what was saved where.
struct SavedParam {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0, numel = 0;
};
struct SavedBucket {
  std::int64_t numel = 0, padded = 0, shard_size = 0;
  std::vector<SavedParam> params;
};
struct SavedLayout {
  std::string dir;
  std::int64_t world = 0, stage = 0, step = 0;
  std::vector<std::string> state;  // optimizer-state names saved
  std::vector<SavedBucket> buckets;
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> where;  // name -> (bucket, position)
};

std::optional<nlohmann::json> manifest_sharding(const std::string& dir) {
  const auto text = read_file(dir + "/" + kCheckpointManifest);
  if (!text) return std::nullopt;
  const auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sharding")) return std::nullopt;
  return j["sharding"];
}

SavedLayout read_layout(const std::string& dir) {
  SavedLayout L;
  L.dir = dir;
  const auto sh = manifest_sharding(dir);
  try {
    if (!sh) throw std::runtime_error("no \"sharding\" layout");
    if (sh->value("format", "") != kLayoutFormat || sh->value("version", 0) != kLayoutVersion)
      throw std::runtime_error(fmt::format("layout format {} version {} (this trainbox reads {} version {})",
                                           sh->value("format", "?"), sh->value("version", 0), kLayoutFormat,
                                           kLayoutVersion));
    L.world = sh->at("world_size").get<std::int64_t>();
    L.stage = sh->at("zero_stage").get<std::int64_t>();
    L.step = sh->at("step").get<std::int64_t>();
    L.state = sh->at("optimizer_state").get<std::vector<std::string>>();
    for (const auto& b : sh->at("buckets")) {
      SavedBucket sb{b.at("numel").get<std::int64_t>(),
                     b.at("padded").get<std::int64_t>(),
                     b.at("shard_size").get<std::int64_t>(),
                     {}};
      for (const auto& p : b.at("params")) {
        sb.params.push_back({p.at("name").get<std::string>(), p.at("shape").get<std::vector<std::int64_t>>(),
                             p.at("offset").get<std::int64_t>(), p.at("numel").get<std::int64_t>()});
        if (!L.where.emplace(sb.params.back().name, std::make_pair(L.buckets.size(), sb.params.size() - 1)).second)
          throw std::runtime_error("parameter " + sb.params.back().name + " appears twice");
      }
      L.buckets.push_back(std::move(sb));
    }
  } catch (const std::exception& e) {
    throw DataError(fmt::format("checkpoint {}: its manifest's sharding layout is unusable: {}", dir, e.what()), kFix);
  }
  return L;
}

// Reads element ranges of the saved flat buckets, loading each rank file once when first needed
// (the files a rank's new shards overlap: about world_before / world_after + 1 of them).
class ShardReader {
 public:
  ShardReader(const SavedLayout& L, bool optim) : L_(L), optim_(optim) {}

  torch::serialize::InputArchive& archive(std::int64_t r) {
    auto& slot = loaded_[r];
    if (slot) return *slot;
    const std::string path = L_.dir + "/" + (optim_ ? optim_file(r) : params_file(r));
    slot = std::make_unique<torch::serialize::InputArchive>();
    reading(path, [&] { slot->load_from(path, torch::kCPU); });
    // What the writer recorded inside the archive, against the manifest (verify() checked rank_<r>.json).
    auto meta = read(r, "meta");  // [rank, world, step]
    if (meta.numel() != 3 || meta[0].item<std::int64_t>() != r || meta[1].item<std::int64_t>() != L_.world ||
        meta[2].item<std::int64_t>() != L_.step)
      throw DataError(fmt::format("checkpoint file {} was written as rank {} of {} at step {}; the manifest says rank "
                                  "{} of {} at step {}",
                                  path, meta[0].item<std::int64_t>(), meta[1].item<std::int64_t>(),
                                  meta[2].item<std::int64_t>(), r, L_.world, L_.step),
                      kFix);
    return *slot;
  }
  torch::Tensor read(std::int64_t r, const std::string& k) {
    auto& ar = archive(r);
    torch::Tensor t;
    const std::string path = L_.dir + "/" + (optim_ ? optim_file(r) : params_file(r));
    reading(path, [&] { ar.read(k, t, /*is_buffer=*/true); });
    return t;
  }
  // Elements [begin, end) of saved bucket b's flat tensor `name` ("param" or a state name).
  torch::Tensor range(const std::string& name, std::size_t b, std::int64_t begin, std::int64_t end) {
    const auto& sb = L_.buckets.at(b);
    if (begin >= end) return torch::empty({0});
    std::vector<torch::Tensor> parts;
    for (std::int64_t x = begin; x < end;) {
      const std::int64_t r = x / sb.shard_size, lo = r * sb.shard_size, hi = std::min(end, lo + sb.shard_size);
      auto shard = read(r, key(name, b));
      if (shard.dim() != 1 || shard.numel() != sb.shard_size)
        throw DataError(fmt::format("checkpoint file {}: {} has {} elements, the manifest's layout {}",
                                    L_.dir + "/" + (optim_ ? optim_file(r) : params_file(r)), key(name, b),
                                    shard.numel(), sb.shard_size),
                        kFix);
      parts.push_back(shard.narrow(0, x - lo, hi - x));
      x = hi;
    }
    return parts.size() == 1 ? parts.front() : torch::cat(parts);
  }
  void drop(std::int64_t r) { loaded_.erase(r); }

 private:
  const SavedLayout& L_;
  bool optim_;
  std::map<std::int64_t, std::unique_ptr<torch::serialize::InputArchive>> loaded_;
};

// The saved place of the parameter named `name`, checked against the one it is loaded into.
const SavedParam& saved_param(const SavedLayout& L, const std::string& name, const torch::Tensor& into) {
  auto it = L.where.find(name);
  if (it == L.where.end())
    throw DataError(fmt::format("checkpoint {} has no parameter {} (it was written for another model)", L.dir, name),
                    "resume with the model the checkpoint was trained with, or start a new run dir");
  const auto& sp = L.buckets[it->second.first].params[it->second.second];
  if (!into.sizes().equals(sp.shape))
    throw DataError(fmt::format("checkpoint {}: parameter {} has shape {}, the model needs {}", L.dir, name,
                                c10::str(c10::IntArrayRef(sp.shape)), c10::str(into.sizes())),
                    "the checkpoint belongs to a different model; start a new run dir");
  return sp;
}

}  // namespace

bool is_sharded_checkpoint(const std::string& dir) { return manifest_sharding(dir).has_value(); }

std::string sharding_json(const dist::DistributedDataParallel& ddp, const Optimizer& opt, std::int64_t step) {
  auto& pg = const_cast<dist::DistributedDataParallel&>(ddp).process_group();
  const auto& params = ddp.parameters();
  const auto& names = ddp.parameter_names();
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& L : ddp.shard_layout()) {
    nlohmann::json ps = nlohmann::json::array();
    for (std::size_t k = 0; k < L.params.size(); ++k) {
      const auto& p = params[L.params[k]];
      ps.push_back({{"name", names[L.params[k]]},
                    {"shape", p.sizes().vec()},
                    {"dtype", c10::toString(p.scalar_type())},
                    {"offset", L.offsets[k]},
                    {"numel", p.numel()}});
    }
    buckets.push_back({{"numel", L.numel}, {"padded", L.padded}, {"shard_size", L.shard_size}, {"params", ps}});
  }
  std::vector<std::string> state;
  for (const auto& [name, ts] : opt.state())
    if (!ts.empty()) state.push_back(name);
  const nlohmann::json j = {{"format", kLayoutFormat},
                            {"version", kLayoutVersion},
                            {"world_size", pg.size()},
                            {"zero_stage", ddp.zero_stage()},
                            {"step", step},
                            {"optimizer_state", state},
                            {"buckets", buckets},
                            {"files_per_rank", {"rank_<r>.params.pt", "rank_<r>.optim.pt", "rank_<r>.json"}}};
  return j.dump();
}

void write_rank_shard(const std::string& dir, const dist::DistributedDataParallel& ddp, const Optimizer& opt,
                      std::int64_t step, const RankLocalEntries& local, const std::function<void()>& between) {
  torch::NoGradGuard ng;
  auto& pg = const_cast<dist::DistributedDataParallel&>(ddp).process_group();
  const std::int64_t r = pg.rank(), world = pg.size();
  if (!std::filesystem::is_directory(dir))
    throw SystemError(fmt::format("checkpoint save failed: rank {} does not see {}, which rank 0 created", r, dir),
                      "sharded checkpoints (dist.zero_stage > 0) need the run dir on a file system every rank "
                      "shares; use a shared --run-dir, or dist.zero_stage = 0");
  const auto meta = torch::tensor({r, world, step}, torch::kInt64);
  // torch's archive writes a tensor's whole storage: a shard that is a slice of its bucket's
  // storage (stages 1 and 2) is written from a copy of 1/world of it; a tensor that is its whole
  // storage (stage 3's shards, the optimizer state) as it is — a copy of the whole optimizer
  // state was 2/N bytes per parameter more at every save.
  auto own = [](const torch::Tensor& t) {
    auto c = t.detach().cpu();
    const bool whole = c.storage_offset() == 0 && c.is_contiguous() && c.storage().nbytes() == c.nbytes();
    return whole ? c : c.clone();
  };
  const auto shards = ddp.optimizer_params();
  std::vector<std::int64_t> sizes;
  {
    torch::serialize::OutputArchive ar;
    ar.write("meta", meta, true);
    for (std::size_t b = 0; b < shards.size(); ++b) {
      ar.write(key("param", b), own(shards[b]), true);
      sizes.push_back(shards[b].numel());
    }
    save_archive(ar, dir + "/" + params_file(r));
  }
  if (between) between();
  nlohmann::json local_names = nlohmann::json::array();
  {
    torch::serialize::OutputArchive ar;
    ar.write("meta", meta, true);
    for (const auto& [name, ts] : opt.state())
      for (std::size_t b = 0; b < ts.size(); ++b) ar.write(key(name, b), own(ts[b]), true);
    ar.write("lr", torch::tensor(opt.lr(), torch::kFloat64), true);
    for (const auto& [name, t] : local) {  // the rank-local extension point (sharded_checkpoint.h)
      ar.write("local." + name, own(t), true);
      local_names.push_back(name);
    }
    save_archive(ar, dir + "/" + optim_file(r));
  }
  const nlohmann::json j = {
      {"rank", r}, {"world_size", world}, {"step", step}, {"shard_sizes", sizes}, {"local", local_names}};
  io::DurableFile::write_text(fmt::format("{}/rank_{}.json", dir, r), j.dump(2) + "\n");
}

void write_sharded_rest(const std::string& d, torch::nn::Module& module, const dist::DistributedDataParallel& ddp,
                        const CheckpointState& s, const std::string& config_toml) {
  std::set<std::string> trained(ddp.parameter_names().begin(), ddp.parameter_names().end());
  torch::serialize::OutputArchive bar;
  for (const auto& b : module.named_buffers()) bar.write(b.key(), b.value(), /*is_buffer=*/true);
  for (const auto& p : module.named_parameters())
    if (!trained.count(p.key())) bar.write(p.key(), p.value(), /*is_buffer=*/true);
  save_archive(bar, d + "/buffers.pt");
  write_checkpoint_rest(d, s, config_toml);
}

void load_sharded_module(const std::string& dir, torch::nn::Module& module, const torch::Device& device) {
  (void)device;  // the module is already on its device: slices are copied into it
  torch::NoGradGuard ng;
  const SavedLayout L = read_layout(dir);
  // --- every name and shape first: nothing is copied into a model it does not fit ---
  std::unordered_map<std::string, torch::Tensor> params;
  for (const auto& p : module.named_parameters()) params[p.key()] = p.value();
  for (const auto& [name, at] : L.where)
    if (!params.count(name))
      throw DataError(fmt::format("checkpoint {} has parameter {}, which the model lacks", dir, name),
                      "resume with the model the checkpoint was trained with, or start a new run dir");
  for (const auto& [name, t] : params)
    if (L.where.count(name)) (void)saved_param(L, name, t);
  torch::serialize::InputArchive bar;
  reading(dir + "/buffers.pt", [&] { bar.load_from(dir + "/buffers.pt", torch::kCPU); });
  std::vector<std::pair<torch::Tensor, torch::Tensor>> rest;  // (into, from): buffers, untrained parameters
  auto take = [&](const std::string& name, const torch::Tensor& into) {
    torch::Tensor t;
    reading(dir + "/buffers.pt", [&] { bar.read(name, t, /*is_buffer=*/true); });
    if (!t.sizes().equals(into.sizes()))
      throw DataError(fmt::format("checkpoint {}: buffer {} has shape {}, the model needs {}", dir, name,
                                  c10::str(t.sizes()), c10::str(into.sizes())),
                      "the checkpoint belongs to a different model; start a new run dir");
    rest.emplace_back(into, t);
  };
  for (const auto& b : module.named_buffers()) take(b.key(), b.value());
  for (const auto& [name, t] : params)
    if (!L.where.count(name)) take(name, t);
  // --- the weights: one rank file at a time, its slice of each bucket to the parameters it covers ---
  ShardReader reader(L, /*optim=*/false);
  for (std::int64_t r = 0; r < L.world; ++r) {
    for (std::size_t b = 0; b < L.buckets.size(); ++b) {
      const auto& sb = L.buckets[b];
      const std::int64_t lo = r * sb.shard_size, hi = lo + sb.shard_size;
      auto shard = reader.range("param", b, lo, std::min(hi, std::max(lo, sb.numel)));
      for (const auto& sp : sb.params) {
        const std::int64_t a = std::max(lo, sp.offset), c = std::min(hi, sp.offset + sp.numel);
        if (a >= c) continue;
        auto& p = params.at(sp.name);
        p.view({-1}).narrow(0, a - sp.offset, c - a).copy_(shard.narrow(0, a - lo, c - a));
      }
    }
    reader.drop(r);  // peak extra memory: one rank's parameter shard
  }
  for (auto& [into, from] : rest) into.copy_(from);
}

void load_sharded_optimizer_rng(const std::string& dir, const dist::DistributedDataParallel* ddp, Optimizer& opt,
                                torch::nn::Module& module) {
  torch::NoGradGuard ng;
  const SavedLayout L = read_layout(dir);
  ShardReader reader(L, /*optim=*/true);
  const std::set<std::string> saved(L.state.begin(), L.state.end());
  for (const auto& [name, ts] : opt.state())
    if (!ts.empty() && !saved.count(name))
      throw DataError(
          fmt::format("checkpoint {} has no optimizer state {} (it was trained with another optimizer)", dir, name),
          "resume with the optimizer the checkpoint was trained with (optim.name), or start a new run dir");
  // Every bucket of one step has the same count; each parameter's is its bucket's.
  auto step_of_bucket = [&](std::size_t b) { return reader.read(0, key("step", b)); };
  if (ddp && ddp->sharded()) {
    // --- into this rank's shards: the saved ranges its new slices cover ---
    const auto& names = ddp->parameter_names();
    const auto& params = ddp->parameters();
    fill_optimizer_shards(
        *ddp, opt,
        [&](const std::string&, int param) {
          const auto& first = names[param];
          (void)saved_param(L, first, params[param]);
          return step_of_bucket(L.where.at(first).first);
        },
        [&](const std::string& name, int param, std::int64_t lo, std::int64_t hi) {
          const auto& sp = saved_param(L, names[param], params[param]);
          const auto sb = L.where.at(sp.name).first;
          return reader.range(name, sb, sp.offset + lo, sp.offset + hi);
        });
    opt.set_lr(reader.read(0, "lr").item<double>());
  } else {
    // --- into every parameter's whole state: the unsharded archive Optimizer::load reads, built in memory ---
    // (keyed by the index among the module's parameters; untrained ones get the zeros an
    // unsharded optimizer holds for them, as Optimizer::save writes them)
    torch::serialize::OutputArchive full;
    const auto named = module.named_parameters();
    for (const auto& [name, ts] : opt.state()) {
      if (ts.empty()) continue;
      for (std::size_t i = 0; i < named.size(); ++i) {
        const std::string& pname = named[i].key();
        const torch::Tensor& p = named[i].value();
        torch::Tensor t;
        if (L.where.count(pname)) {
          const auto& sp = saved_param(L, pname, p);
          const auto sb = L.where.at(pname).first;
          t = name == "step" ? step_of_bucket(sb).clone()
                             : reader.range(name, sb, sp.offset, sp.offset + sp.numel).reshape(p.sizes()).clone();
        } else {
          t = name == "step" ? torch::zeros_like(step_of_bucket(0))
                             : torch::zeros(p.sizes(), p.options().device(torch::kCPU));
        }
        full.write(key(name, i), t, /*is_buffer=*/true);
      }
    }
    full.write("lr", reader.read(0, "lr"), /*is_buffer=*/true);
    std::stringstream bytes;
    full.save_to(bytes);
    torch::serialize::InputArchive in;
    in.load_from(bytes, torch::kCPU);
    opt.load(in);
  }
  // --- the CPU generator: rank 0's, as an unsharded checkpoint restores it on every rank ---
  load_checkpoint_rng(dir);
}

RankLocalEntries read_rank_local(const std::string& dir, int rank, int world) {
  const SavedLayout L = read_layout(dir);
  if (L.world != world) return {};
  const auto j =
      nlohmann::json::parse(read_file(fmt::format("{}/rank_{}.json", dir, rank)).value_or(""), nullptr, false);
  if (!j.is_object() || !j.contains("local")) return {};
  ShardReader reader(L, /*optim=*/true);
  RankLocalEntries out;
  for (const auto& n : j["local"])
    out.emplace_back(n.get<std::string>(), reader.read(rank, "local." + n.get<std::string>()));
  return out;
}

}  // namespace trainbox::train
