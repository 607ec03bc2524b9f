#include <trainbox/bench/command.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/distributed/device.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/env/nccl_log.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/result_file.h>

namespace trainbox::bench {

extern const BenchPlugin kGemmBench, kAttentionBench, kMemcpyBench, kAllreduceBench, kAllreduceCompressedBench,
    kTrainBench, kDataloaderBench, kHeartbeatBench;

const std::vector<const BenchPlugin*>& bench_plugins() {
  static const std::vector<const BenchPlugin*> k = {
      &kGemmBench,  &kAttentionBench,  &kMemcpyBench,   &kAllreduceBench, &kAllreduceCompressedBench,
      &kTrainBench, &kDataloaderBench, &kHeartbeatBench};
  return k;
}

std::string sizes_help() {
  std::vector<std::string> parts;
  for (const auto* p : bench_plugins())
    if (p->sizes) parts.push_back(fmt::format("{}: {}", p->name, p->sizes));
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string dtypes_help() {
  std::vector<std::string> parts;
  for (const auto* p : bench_plugins())
    if (p->dtypes) parts.push_back(fmt::format("{}: {}", p->name, fmt::join(p->dtypes(), " ")));
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::vector<std::string> bench_names() {
  std::vector<std::string> names;
  for (const auto* p : bench_plugins()) names.emplace_back(p->name);
  return names;
}

int run_bench_command(const std::string& what, const BenchCommand& a) {
  auto env = dist::WorkerEnv::from_environment();
  const bool all = what == "all", rank0 = env.rank == 0;
  std::vector<const BenchPlugin*> chosen;
  for (const auto* p : bench_plugins())
    if (all || what == p->name) chosen.push_back(p);
  if (chosen.empty())
    throw UsageError("no benchmark named \"" + what + "\"",
                     fmt::format("use one of: {} or all", fmt::join(bench_names(), ", ")));
  BenchOptions o;
  const dist::DeviceChoice dc = dist::choose_device(a.device, env.local_rank, env.local_world_size, "--device");
  o.device = dc.device;
  if (!dc.note.empty() && rank0) std::cerr << dc.note << "\n";
  o.quick = a.quick;
  if (a.quick) {
    o.iters = 5;
    o.warmup = 2;
  }
  if (a.iters > 0) o.iters = a.iters;
  if (a.warmup >= 0) o.warmup = a.warmup;
  o.check = !a.no_check;
  o.sizes = a.sizes;
  o.dtypes = a.dtypes;
  o.allreduce = a.ar;
  o.images = a.images;
  o.train = a.train;
  o.live = a.json || !rank0 ? nullptr : stdout;  // text: each row as it is measured; --json: one document
  o.allreduce.check = a.ar_check != 0 && !a.no_check;
  if (a.quick) {
    o.allreduce.max_bytes = std::min<std::int64_t>(o.allreduce.max_bytes, 16 << 20);
    o.allreduce.factor = std::max(o.allreduce.factor, 4.0);
    o.allreduce.iters = std::min(o.allreduce.iters, 10);
  }
  // NCCL says which transport it chose only in its log: capture it from before the first communicator.
  std::unique_ptr<env::NcclLogCapture> nccl_log;
  if (o.device.is_cuda() &&
      std::any_of(chosen.begin(), chosen.end(), [](const BenchPlugin* p) { return p->collective; })) {
    nccl_log = std::make_unique<env::NcclLogCapture>();
    o.allreduce.nccl_log = nccl_log.get();
  }
  std::shared_ptr<dist::ProcessGroup> pg;
  std::vector<BenchReport> reports;
  for (const auto* p : chosen) {
    if (p->collective) {
      if (!pg) {
        if (env.source == dist::WorkerSource::kSingle) env.master_port = 0;  // a world of one, on a free port
        pg = dist::ProcessGroup::init(env, {}, o.device);
      }
      o.group = pg.get();
      o.shared_group = pg;
      auto r = p->run(o);
      pg->barrier();
      if (rank0) reports.push_back(std::move(r));
    } else if (env.source != dist::WorkerSource::kSingle && p->every_rank && p->every_rank(o)) {
      auto r = p->run(o);  // a data-parallel job of every rank, on its own process group
      if (rank0) reports.push_back(std::move(r));
    } else if (rank0) {
      reports.push_back(p->run(o));
    }
  }
  bool failed = false;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : reports) {
    failed |= r.failed();
    if (a.json)
      arr.push_back(r.to_json());
    else if (r.live())
      r.finish();  // the rows are out: the footers
    else
      std::cout << r.render() << "\n";
  }
  if (a.json && rank0) write_result(arr.size() == 1 ? arr[0] : arr, env.rank);
  return failed ? kExitFailed : kExitOk;
}

}  // namespace trainbox::bench
