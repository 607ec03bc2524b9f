#include <trainbox/dist/worker_env.h>

#include <algorithm>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/strings.h>

namespace trainbox::dist {

namespace {
int to_int(const std::string& name, const std::string& v, int lo) {
  auto x = parse_integer(v);
  if (!x || *x < lo || *x > (1 << 24))
    throw UsageError(fmt::format("{}={} is not an integer >= {}", name, v, lo), "fix the launcher's environment");
  return static_cast<int>(*x);
}
}  // namespace

WorkerEnv WorkerEnv::from(const std::function<std::optional<std::string>(const std::string&)>& get) {
  WorkerEnv e;
  auto num = [&](const char* name, int lo, int dflt) {
    auto v = get(name);
    return v ? to_int(name, *v, lo) : dflt;
  };
  if (get("RANK") || get("WORLD_SIZE")) {
    e.source = "torchrun";
    e.rank = num("RANK", 0, 0);
    e.world_size = num("WORLD_SIZE", 1, 1);
    e.local_rank = num("LOCAL_RANK", 0, 0);
    e.local_world_size = num("LOCAL_WORLD_SIZE", 1, 1);
    e.node_rank = num("GROUP_RANK", 0, 0);
  } else if (get("SLURM_PROCID") && get("SLURM_NTASKS")) {
    e.source = "slurm";
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
      auto job = parse_integer(*id);  // job ids pass 2^24 on busy clusters: no cap here
      if (!job || *job < 0)
        throw UsageError(fmt::format("SLURM_JOB_ID={} is not a job number", *id), "fix the launcher's environment");
      e.master_port = slurm_master_port(*job);  // same on every task of the job
    }
  } else {
    return e;  // single process
  }
  if (auto a = get("MASTER_ADDR"))
    e.master_addr = *a;
  else if (e.world_size > 1 && e.source == "torchrun")
    throw UsageError(fmt::format("WORLD_SIZE={} but MASTER_ADDR is not set", e.world_size),
                     "launch with `trainbox run` or torchrun, or export MASTER_ADDR and MASTER_PORT");
  if (get("MASTER_PORT")) e.master_port = num("MASTER_PORT", 1, 29500);
  if (e.master_port > 65535)
    throw UsageError(fmt::format("MASTER_PORT={} is not a port", e.master_port), "use 1..65535");
  if (e.rank >= e.world_size)
    throw UsageError(
        fmt::format("RANK={} but WORLD_SIZE={}: ranks run from 0 to {}", e.rank, e.world_size, e.world_size - 1),
        "fix the launcher's environment");
  if (e.local_rank >= e.local_world_size && e.source == "torchrun" && get("LOCAL_WORLD_SIZE"))
    throw UsageError(fmt::format("LOCAL_RANK={} but LOCAL_WORLD_SIZE={}", e.local_rank, e.local_world_size),
                     "fix the launcher's environment");
  e.restart_count = num("TORCHELASTIC_RESTART_COUNT", 0, 0);
  auto agent = get("TORCHELASTIC_USE_AGENT_STORE");
  e.use_agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  return e;
}

WorkerEnv WorkerEnv::from_environment() { return from(process_env()); }

}  // namespace trainbox::dist
