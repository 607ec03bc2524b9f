// `trainbox run`'s resolution of options and environment (launch/run_config.h), as a pure
// function of (RunArgs, environment), then every worker's environment. Input: lines
// "NAME=value"; NAME is an option of launch::run_options() (its first long flag without the
// dashes, '-' as '_': nproc_per_node, rdzv_conf, role, …; a switch is on for a non-empty value),
// "command" (one word of the worker command a line), or an environment variable (upper case).
// The options come from the table, so one added there is fuzzed with no change here.
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
  // NAME -> its row, built once: "--nproc-per-node" is nproc_per_node.
  static const std::map<std::string, const RunOption*> opts = [] {
    std::map<std::string, const RunOption*> m;
    for (const RunOption& o : run_options()) {
      std::string name(o.flag().substr(2));
      std::replace(name.begin(), name.end(), '-', '_');
      m.emplace(name, &o);
    }
    return m;
  }();
  std::size_t pos = 0;
  while (pos < in.size()) {
    auto nl = in.find('\n', pos);
    if (nl == std::string::npos) nl = in.size();
    const std::string line = in.substr(pos, nl - pos);
    pos = nl + 1;
    const auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    if (auto it = opts.find(name); it != opts.end()) {
      if (!it->second->toggle)
        a.set(it->second->flag(), value);
      else if (!value.empty())
        a.set(it->second->flag());
      else
        a.unset(it->second->flag());
    } else if (name == "command") {
      a.command.push_back(value);
    } else if (std::all_of(name.begin(), name.end(),
                           [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; })) {
      env[name] = value;
    }
  }
  for (const char* machine : {"gpu", "auto"}) {  // these probe the machine: not a pure function
    if (auto n = a.get("--nproc-per-node"); n && n->find(machine) != std::string::npos) return 0;
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
