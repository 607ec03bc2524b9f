#include <trainbox/bench/command.h>

#include <iostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/dist/process_group.h>
#include <trainbox/dist/worker_env.h>
#include <trainbox/train/device.h>
#include <trainbox/util/errors.h>

namespace trainbox::bench {
namespace {

bool report_failed(const BenchReport& r) {
  auto j = r.to_json();
  for (const auto& f : j["footer"])
    if (f.get<std::string>().find("FAIL") != std::string::npos) return true;
  for (const auto& row : j["rows"])
    for (const auto& [k, v] : row.items())
      if ((k == "check" && v.is_string() && v.get<std::string>().rfind("FAIL", 0) == 0) ||
          ((k == "oop_wrong" || k == "ip_wrong") && v.is_number() && v.get<std::int64_t>() > 0))
        return true;
  return false;
}

}  // namespace

int run_bench_command(const std::string& what, const BenchCommand& a) {
  auto env = dist::WorkerEnv::from_environment();
  BenchOptions o;
  o.device = train::resolve_device(a.device, env.local_rank);
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
  std::vector<BenchReport> reports;
  const bool all = what == "all", rank0 = env.rank == 0;
  if ((all || what == "gemm") && rank0) reports.push_back(bench_gemm(o));
  if ((all || what == "memcpy") && rank0) reports.push_back(bench_memcpy(o));
  if (all || what == "allreduce") {
    if (env.source == "single") env.master_port = 0;  // a world of one, on a free port
    auto pg = dist::ProcessGroup::init(env, {}, o.device);
    AllreduceOptions ar = a.ar;
    ar.check = a.ar_check != 0 && !a.no_check;
    if (a.quick) {
      ar.max_bytes = std::min<std::int64_t>(ar.max_bytes, 16 << 20);
      ar.factor = std::max(ar.factor, 4.0);
      ar.iters = std::min(ar.iters, 10);
    }
    auto r = bench_allreduce(ar, *pg, o.device);
    pg->barrier();
    if (rank0) reports.push_back(std::move(r));
  }
  if ((all || what == "train") && rank0) reports.push_back(bench_train(o));
  if ((all || what == "dataloader") && rank0) reports.push_back(bench_dataloader(o));
  bool failed = false;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : reports) {
    failed |= report_failed(r);
    if (a.json) arr.push_back(r.to_json());
    else std::cout << r.render() << "\n";
  }
  if (a.json && rank0) std::cout << (arr.size() == 1 ? arr[0] : arr).dump(2) << "\n";
  return failed ? kExitFailed : kExitOk;
}

}  // namespace trainbox::bench
