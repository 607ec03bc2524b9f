#include <trainbox/dist/worker_env.h>

#include <cstdlib>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::dist {

namespace {
int to_int(const std::string& name, const std::string& v, int lo) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > (1 << 24))
    throw UsageError(fmt::format("{}={} is not an integer >= {}", name, v, lo), "fix the launcher's environment");
  return static_cast<int>(x);
}
}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  std::string first = nodelist.substr(0, nodelist.find(','));
  auto br = nodelist.find('[');
  if (br == std::string::npos || br > nodelist.find(',')) return first;
  // prefix[a-b,c]: the first host is prefix + a (zero padding kept)
  std::string prefix = nodelist.substr(0, br), inner = nodelist.substr(br + 1);
  std::string n;
  for (char c : inner) {
    if (c == '-' || c == ',' || c == ']') break;
    n += c;
  }
  return prefix + n;
}

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
    if (auto t = get("SLURM_NTASKS_PER_NODE")) e.local_world_size = to_int("SLURM_NTASKS_PER_NODE", split(*t, '(')[0], 1);
    if (auto nl = get("SLURM_JOB_NODELIST"); nl && !get("MASTER_ADDR")) e.master_addr = first_slurm_host(*nl);
    if (auto id = get("SLURM_JOB_ID"); id && !get("MASTER_PORT"))
      e.master_port = 10000 + to_int("SLURM_JOB_ID", *id, 0) % 50000;  // same on every task of the job
  } else {
    return e;  // single process
  }
  if (auto a = get("MASTER_ADDR")) e.master_addr = *a;
  else if (e.world_size > 1 && e.source == "torchrun")
    throw UsageError(fmt::format("WORLD_SIZE={} but MASTER_ADDR is not set", e.world_size),
                     "launch with `trainbox run` or torchrun, or export MASTER_ADDR and MASTER_PORT");
  if (get("MASTER_PORT")) e.master_port = num("MASTER_PORT", 1, 29500);
  if (e.master_port > 65535) throw UsageError(fmt::format("MASTER_PORT={} is not a port", e.master_port), "use 1..65535");
  if (e.rank >= e.world_size)
    throw UsageError(fmt::format("RANK={} but WORLD_SIZE={}: ranks run from 0 to {}", e.rank, e.world_size, e.world_size - 1),
                     "fix the launcher's environment");
  if (e.local_rank >= e.local_world_size && e.source == "torchrun" && get("LOCAL_WORLD_SIZE"))
    throw UsageError(fmt::format("LOCAL_RANK={} but LOCAL_WORLD_SIZE={}", e.local_rank, e.local_world_size),
                     "fix the launcher's environment");
  e.restart_count = num("TORCHELASTIC_RESTART_COUNT", 0, 0);
  auto agent = get("TORCHELASTIC_USE_AGENT_STORE");
  e.use_agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  return e;
}

WorkerEnv WorkerEnv::from_environment() {
  return from([](const std::string& n) -> std::optional<std::string> {
    const char* v = std::getenv(n.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
}

}  // namespace trainbox::dist
