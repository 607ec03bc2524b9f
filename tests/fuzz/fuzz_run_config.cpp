// `trainbox run`'s resolution of options and environment (launch/run_config.h), as a pure
// function of (RunArgs, environment), then every worker's environment. Input: lines
// "NAME=value"; NAME is an option (lower case: nproc_per_node, rdzv_conf, …, standalone,
// module, no_python, no_prefix, command) or an environment variable (upper case).
// "gpu"/"auto" process counts probe the machine (NVML) and are left out.
#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "fuzz_common.h"
#include <trainbox/launch/run_config.h>
#include <trainbox/util/errors.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainbox::launch;
  const std::string in(reinterpret_cast<const char*>(data), size);
  RunArgs a;
  std::map<std::string, std::string> env;
  std::map<std::string, std::optional<std::string>*> opts = {{"nproc_per_node", &a.nproc_per_node},
                                                             {"nnodes", &a.nnodes},
                                                             {"node_rank", &a.node_rank},
                                                             {"master_addr", &a.master_addr},
                                                             {"master_port", &a.master_port},
                                                             {"max_restarts", &a.max_restarts},
                                                             {"log_dir", &a.log_dir},
                                                             {"redirects", &a.redirects},
                                                             {"tee", &a.tee},
                                                             {"local_ranks_filter", &a.local_ranks_filter},
                                                             {"run_id", &a.run_id},
                                                             {"grace_period", &a.grace_period},
                                                             {"rdzv_backend", &a.rdzv_backend},
                                                             {"rdzv_endpoint", &a.rdzv_endpoint},
                                                             {"rdzv_conf", &a.rdzv_conf},
                                                             {"monitor_interval", &a.monitor_interval},
                                                             {"local_addr", &a.local_addr},
                                                             {"stall_timeout", &a.stall_timeout},
                                                             {"on_stall", &a.on_stall},
                                                             {"stack_timeout", &a.stack_timeout}};
  std::size_t pos = 0;
  while (pos < in.size()) {
    auto nl = in.find('\n', pos);
    if (nl == std::string::npos) nl = in.size();
    const std::string line = in.substr(pos, nl - pos);
    pos = nl + 1;
    const auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    if (auto it = opts.find(name); it != opts.end())
      *it->second = value;
    else if (name == "standalone")
      a.standalone = !value.empty();
    else if (name == "module")
      a.module = !value.empty();
    else if (name == "no_python")
      a.no_python = !value.empty();
    else if (name == "no_prefix")
      a.no_prefix = !value.empty();
    else if (name == "command")
      a.command.push_back(value);
    else if (std::all_of(name.begin(), name.end(),
                         [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }))
      env[name] = value;
  }
  for (const char* machine : {"gpu", "auto"}) {  // these probe the machine: not a pure function
    if (a.nproc_per_node && a.nproc_per_node->find(machine) != std::string::npos) return 0;
    if (env.count("PET_NPROC_PER_NODE") && env["PET_NPROC_PER_NODE"].find(machine) != std::string::npos) return 0;
  }
  if (a.command.empty()) a.command = {"true"};
  try {
    RunConfig cfg = resolve_run_config(a, map_env(env));
    FUZZ_CHECK(cfg.nproc_per_node >= 1 && cfg.nnodes >= 1 && cfg.node_rank >= 0);
    FUZZ_CHECK(cfg.master_port >= 0 && cfg.master_port <= 65535);
    if (cfg.nproc_per_node > 64) return 0;  // worker_env per rank: bounded work per input
    for (int local = 0; local < cfg.nproc_per_node; ++local)
      for (const auto& [k, v] : worker_env(cfg, local, 0)) FUZZ_CHECK(!k.empty() && k.find('=') == std::string::npos);
  } catch (const trainbox::Error&) {
  }
  return 0;
}
