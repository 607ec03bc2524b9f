#include <trainbox/distributed/worker_env.h>

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/parse.h>

namespace trainbox::dist {

namespace {
constexpr const char* kFixEnv = "fix the launcher's environment";
// Ranks and sizes: 2^24 is far beyond any job and keeps the product of two in an int64.
int to_int(const std::string& name, const std::string& v, int lo) {
  return static_cast<int>(parse_int(Given{v, name}, lo, 1 << 24, kFixEnv));
}
}  // namespace

std::string_view source_name(WorkerSource s) {
  static constexpr std::string_view kNames[] = {"single", "torchrun", "slurm"};  // by WorkerSource's value
  const auto i = static_cast<std::size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

WorkerEnv WorkerEnv::from(const std::function<std::optional<std::string>(const std::string&)>& get) {
  WorkerEnv e;
  auto num = [&](const char* name, int lo, int dflt) {
    auto v = get(name);
    return v ? to_int(name, *v, lo) : dflt;
  };
  if (get("RANK") || get("WORLD_SIZE")) {
    e.source = WorkerSource::kTorchrun;
    e.rank = num("RANK", 0, 0);
    e.world_size = num("WORLD_SIZE", 1, 1);
    e.local_rank = num("LOCAL_RANK", 0, 0);
    e.local_world_size = num("LOCAL_WORLD_SIZE", 1, 1);
    e.node_rank = num("GROUP_RANK", 0, 0);
  } else if (get("SLURM_PROCID") && get("SLURM_NTASKS")) {
    e.source = WorkerSource::kSlurm;
    e.rank = num("SLURM_PROCID", 0, 0);
    e.world_size = num("SLURM_NTASKS", 1, 1);
    e.local_rank = num("SLURM_LOCALID", 0, 0);
    e.node_rank = num("SLURM_NODEID", 0, 0);
    // This node's task count: SLURM_TASKS_PER_NODE ("2(x3),1") indexed by node, else the
    // uniform SLURM_NTASKS_PER_NODE.
    if (auto t = get("SLURM_TASKS_PER_NODE")) {
      auto counts = expand_tasks_per_node(*t);
      e.local_world_size = counts.at(std::min<std::size_t>(static_cast<std::size_t>(e.node_rank), counts.size() - 1));
    } else if (auto n = get("SLURM_NTASKS_PER_NODE")) {
      e.local_world_size = expand_tasks_per_node(*n).front();
    }
    auto nodelist = get("SLURM_JOB_NODELIST");
    if (!nodelist) nodelist = get("SLURM_NODELIST");
    if (nodelist && !get("MASTER_ADDR")) e.master_addr = first_host(*nodelist);
    if (auto id = get("SLURM_JOB_ID"); id && !get("MASTER_PORT")) {
      // Job ids pass 2^24 on busy clusters: no cap here.
      e.master_port = slurm_master_port(parse_int(Given{*id, "SLURM_JOB_ID"}, 0, kNoLimit, kFixEnv));
    }
  } else {
    return e;  // single process
  }
  if (auto a = get("MASTER_ADDR"))
    e.master_addr = *a;
  else if (e.world_size > 1 && e.source == WorkerSource::kTorchrun)
    throw UsageError(fmt::format("WORLD_SIZE={} but MASTER_ADDR is not set", e.world_size),
                     "launch with `trainbox run` or torchrun, or export MASTER_ADDR and MASTER_PORT");
  if (auto p = get("MASTER_PORT"))
    e.master_port = static_cast<int>(parse_int(Given{*p, "MASTER_PORT"}, 1, 65535, kFixEnv));
  if (e.rank >= e.world_size)
    throw UsageError(
        fmt::format("RANK={} but WORLD_SIZE={}: ranks run from 0 to {}", e.rank, e.world_size, e.world_size - 1),
        kFixEnv);
  if (e.local_rank >= e.local_world_size && e.source == WorkerSource::kTorchrun && get("LOCAL_WORLD_SIZE"))
    throw UsageError(fmt::format("LOCAL_RANK={} but LOCAL_WORLD_SIZE={}", e.local_rank, e.local_world_size), kFixEnv);
  e.restart_count = num("TORCHELASTIC_RESTART_COUNT", 0, 0);
  if (auto range = get(kElasticNnodesEnv)) {  // "MIN:MAX", as trainbox run writes it
    const auto colon = range->find(':');
    if (colon == std::string::npos)
      throw UsageError(fmt::format("{}={} is not MIN:MAX", kElasticNnodesEnv, *range), kFixEnv);
    e.nnodes_min = to_int(kElasticNnodesEnv, range->substr(0, colon), 1);
    e.nnodes_max = to_int(kElasticNnodesEnv, range->substr(colon + 1), e.nnodes_min);
  }
  e.use_agent_store = is_truthy(get("TORCHELASTIC_USE_AGENT_STORE").value_or(""));  // torchrun writes "True"
  return e;
}

WorkerEnv WorkerEnv::from_environment() { return from(process_env()); }

}  // namespace trainbox::dist
