#include <trainbox/launch/run_config.h>

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include <fmt/format.h>

#include <trainbox/env/nvml.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace {

// A value and where it came from, so errors can say "PET_NNODES=0" rather than just "0".
struct Value {
  std::string text;
  std::string name;  // "--nnodes", "PET_NNODES", "SLURM_NNODES" …
  bool cli = false;
  std::string shown() const { return cli ? fmt::format("{} {}", name, text) : fmt::format("{}={}", name, text); }
};

std::optional<long long> parse_integer(std::string_view s) {
  std::string t = trim(s);
  if (t.empty() || t.size() > 18) return std::nullopt;
  std::size_t i = (t[0] == '-' || t[0] == '+') ? 1 : 0;
  if (i == t.size() || !std::all_of(t.begin() + i, t.end(), [](char c) { return std::isdigit((unsigned char)c); }))
    return std::nullopt;
  return std::stoll(t);
}

long long integer_in(const Value& v, long long lo, long long hi, const std::string& hint) {
  auto n = parse_integer(v.text);
  if (!n) throw UsageError(fmt::format("{}: not a whole number", v.shown()), hint);
  if (*n < lo) throw UsageError(fmt::format("{}: must be at least {}", v.shown(), lo), hint);
  if (*n > hi) throw UsageError(fmt::format("{}: must be at most {}", v.shown(), hi), hint);
  return *n;
}

bool truthy(const std::optional<std::string>& v) {
  if (!v) return false;
  std::string t = trim(*v);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  return t == "1" || t == "true" || t == "yes" || t == "on";
}

// --- schedulers: defaults for the node layout when torchrun's own variables are absent ---
struct SchedulerDefaults {
  std::string name;  // "", "slurm", "kubeflow"
  std::optional<Value> nproc_per_node, nnodes, node_rank, master_addr, master_port, run_id;
};

std::optional<Value> from_env(const EnvLookup& env, const std::string& name) {
  if (auto v = env(name); v && !trim(*v).empty()) return Value{trim(*v), name};
  return std::nullopt;
}

SchedulerDefaults detect_scheduler(const EnvLookup& env) {
  SchedulerDefaults s;
  if (auto job = from_env(env, "SLURM_JOB_ID")) {
    s.name = "slurm";
    s.nnodes = from_env(env, "SLURM_NNODES");
    if (!s.nnodes) s.nnodes = from_env(env, "SLURM_JOB_NUM_NODES");
    s.node_rank = from_env(env, "SLURM_NODEID");
    s.nproc_per_node = from_env(env, "SLURM_NTASKS_PER_NODE");
    s.master_addr = from_env(env, "MASTER_ADDR");
    if (!s.master_addr) {
      auto list = from_env(env, "SLURM_JOB_NODELIST");
      if (!list) list = from_env(env, "SLURM_NODELIST");
      if (list) s.master_addr = Value{slurm_first_host(list->text), list->name + " (first host)"};
    }
    s.master_port = from_env(env, "MASTER_PORT");
    if (!s.master_port) {
      // Every node of the job derives the same port without talking to the others; 10000–59999
      // stays clear of well-known ports and of Linux's ephemeral range (32768–60999 only
      // partly overlaps; collisions there are what the port check below reports).
      if (auto id = parse_integer(job->text); id && *id >= 0)
        s.master_port = Value{std::to_string(10000 + *id % 50000), "SLURM_JOB_ID (10000 + id % 50000)"};
    }
    s.run_id = job;
    return s;
  }
  // Kubeflow PyTorchJob v1 sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE (= pods) and RANK (= pod
  // index). A worker of another launcher has those too (WORLD_SIZE = processes!) but always
  // LOCAL_RANK, so LOCAL_RANK excludes it; Kubernetes or PET_NNODES confirms the operator.
  auto addr = from_env(env, "MASTER_ADDR"), world = from_env(env, "WORLD_SIZE"), rank = from_env(env, "RANK");
  if (addr && world && rank && !env("LOCAL_RANK") && (env("KUBERNETES_SERVICE_HOST") || env("PET_NNODES"))) {
    s.name = "kubeflow";
    s.master_addr = addr;
    s.master_port = from_env(env, "MASTER_PORT");
    s.nnodes = world;
    s.node_rank = rank;
  }
  return s;
}

// CLI → PET_<NAME> (and aliases) → scheduler default.
std::optional<Value> pick(const std::optional<std::string>& cli, const std::string& option,
                          const std::vector<std::string>& env_names, const EnvLookup& env,
                          const std::optional<Value>& scheduler = std::nullopt) {
  if (cli) return Value{*cli, option, true};
  for (const auto& n : env_names)
    if (auto v = from_env(env, n)) return v;
  return scheduler;
}

StdStreams parse_std(const Value& v, int nproc) {
  const std::string hint =
      "use 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank like 0:3,1:2";
  auto level = [&](std::string_view s) {
    auto n = parse_integer(s);
    if (!n || *n < 0 || *n > 3)
      throw UsageError(fmt::format("{}: '{}' is not a stream choice", v.shown(), trim(s)), hint);
    return static_cast<int>(*n);
  };
  StdStreams out;
  if (v.text.find(':') == std::string::npos) {
    out.all = level(v.text);
    return out;
  }
  for (const auto& item : split(v.text, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) throw UsageError(fmt::format("{}: '{}' lacks RANK:VALUE", v.shown(), item), hint);
    auto rank = parse_integer(item.substr(0, colon));
    if (!rank || *rank < 0 || *rank >= nproc)
      throw UsageError(fmt::format("{}: local rank '{}' does not exist with --nproc-per-node {}", v.shown(),
                                   trim(item.substr(0, colon)), nproc),
                       fmt::format("local ranks are 0..{}", nproc - 1));
    out.by_local_rank[static_cast<int>(*rank)] = level(item.substr(colon + 1));
  }
  return out;
}

std::vector<int> parse_rank_filter(const Value& v, int nproc) {
  std::string t = trim(v.text);
  if (!t.empty() && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  std::vector<int> out;
  for (const auto& item : split(t, ',')) {
    auto r = parse_integer(item);
    if (!r || *r < 0 || *r >= nproc)
      throw UsageError(fmt::format("{}: no local rank '{}' with --nproc-per-node {}", v.shown(), trim(item), nproc),
                       fmt::format("list local ranks 0..{} separated by commas, e.g. 0,{}", nproc - 1, nproc - 1));
    out.push_back(static_cast<int>(*r));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string random_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

int affinity_cpu_count() {
  // Hardware threads this process may run on (taskset, cgroup cpusets), which in a container
  // is the honest answer; hardware_concurrency() reports the whole host.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int resolve_nproc_from(const Value& v, int gpu_count, int cpu_count) {
  const std::string hint = "pass a count of at least 1, or gpu, cpu or auto";
  std::string t = trim(v.text);
  if (t == "cpu") return cpu_count;
  if (t == "auto") return gpu_count > 0 ? gpu_count : cpu_count;
  if (t == "gpu") {
    if (gpu_count <= 0)
      throw UsageError(fmt::format("{}: no NVIDIA GPU is visible (no /dev/nvidia<N>, NVML sees none, or "
                                   "CUDA_VISIBLE_DEVICES hides them all)",
                                   v.shown()),
                       "run `trainbox doctor`, or pass cpu, auto or a count");
    return gpu_count;
  }
  return static_cast<int>(integer_in(v, 1, 1 << 16, hint));
}

}  // namespace

// --- environment ---
EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

EnvLookup map_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

int StdStreams::of(int local_rank) const {
  auto it = by_local_rank.find(local_rank);
  return it != by_local_rank.end() ? it->second : all;
}

// --- nproc ---
int resolve_nproc(const std::string& spec, int gpu_count, int cpu_count) {
  return resolve_nproc_from(Value{spec, "--nproc-per-node", true}, gpu_count, cpu_count);
}

int resolve_nproc(const std::string& spec) {
  std::string t = trim(spec);
  bool needs_gpus = t == "gpu" || t == "auto";
  return resolve_nproc(spec, needs_gpus ? visible_gpu_count() : 0, affinity_cpu_count());
}

int visible_gpu_count() {
  int physical = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    std::string n = e.path().filename().string();
    if (n.size() > 6 && starts_with(n, "nvidia") &&
        std::all_of(n.begin() + 6, n.end(), [](char c) { return std::isdigit((unsigned char)c); }))
      ++physical;
  }
  if (physical == 0) {
    // Device nodes can live elsewhere (some container runtimes); NVML still counts them.
    auto nvml = env::Nvml::open();
    if (nvml) physical = static_cast<int>(nvml.gpus(false).size());
  }
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!cvd || physical == 0) return physical;
  // CUDA stops enumerating at the first entry it cannot use ("-1", an index past the end).
  int visible = 0;
  for (const auto& entry : split(cvd, ',', false)) {
    std::string t = trim(entry);
    auto idx = parse_integer(t);
    bool ok = idx ? (*idx >= 0 && *idx < physical) : (starts_with(t, "GPU-") || starts_with(t, "MIG-"));
    if (!ok) break;
    ++visible;
  }
  return std::min(visible, physical);
}

// --- Slurm node lists ---
std::string slurm_first_host(const std::string& nodelist) {
  // The first top-level entry ("a[1-2],b" → "a[1-2]"): commas inside brackets separate
  // numbers, not hosts. Then each bracket group contributes its first number, keeping its
  // zero padding ("x[007-009]" → "x007"; "n[1-2]-ib[3,4]" → "n1-ib3").
  std::string entry;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    entry += c;
  }
  std::string host;
  for (std::size_t i = 0; i < entry.size();) {
    if (entry[i] == ']') break;
    if (entry[i] != '[') {
      host += entry[i++];
      continue;
    }
    auto close = entry.find(']', i);
    if (close == std::string::npos) break;
    std::string group = entry.substr(i + 1, close - i - 1);
    host += trim(group.substr(0, group.find_first_of(",-")));
    i = close + 1;
  }
  host = trim(host);
  if (host.empty() || depth != 0 || host.find_first_of("[]") != std::string::npos)
    throw UsageError(fmt::format("Slurm node list '{}' is not in a form trainbox understands", nodelist),
                     "pass --master-addr with the first node's host name");
  return host;
}

// --- the whole config ---
RunConfig resolve_run_config(const RunArgs& a, const EnvLookup& env) {
  RunConfig c;
  c.standalone = a.standalone || truthy(env("PET_STANDALONE"));
  // --standalone is one node on localhost: the scheduler's layout does not apply.
  SchedulerDefaults sched = c.standalone ? SchedulerDefaults{} : detect_scheduler(env);
  c.scheduler = sched.name;

  if (auto v = pick(a.nproc_per_node, "--nproc-per-node", {"PET_NPROC_PER_NODE"}, env, sched.nproc_per_node)) {
    std::string t = trim(v->text);
    bool needs_gpus = t == "gpu" || t == "auto";
    c.nproc_per_node = resolve_nproc_from(*v, needs_gpus ? visible_gpu_count() : 0, affinity_cpu_count());
  }

  if (c.standalone) {
    const char* why = "--standalone runs one node on 127.0.0.1 with a free port";
    if (a.nnodes && trim(*a.nnodes) != "1" && trim(*a.nnodes) != "1:1")
      throw UsageError(fmt::format("--standalone conflicts with --nnodes {}", *a.nnodes),
                       fmt::format("{}; drop one of them", why));
    if (a.node_rank && trim(*a.node_rank) != "0")
      throw UsageError(fmt::format("--standalone conflicts with --node-rank {}", *a.node_rank),
                       fmt::format("{}; drop one of them", why));
    if (a.master_addr || a.master_port)
      throw UsageError(fmt::format("--standalone conflicts with {}", a.master_port ? "--master-port " + *a.master_port
                                                                                  : "--master-addr " + *a.master_addr),
                       fmt::format("{}; drop one of them", why));
    c.master_port = 0;
  } else {
    if (auto v = pick(a.nnodes, "--nnodes", {"PET_NNODES"}, env, sched.nnodes)) {
      // torchrun also takes MIN:MAX for elastic jobs; a static launcher can only honour N or N:N.
      Value n = *v;
      if (auto colon = n.text.find(':'); colon != std::string::npos) {
        std::string lo = trim(n.text.substr(0, colon)), hi = trim(n.text.substr(colon + 1));
        if (lo != hi)
          throw UsageError(fmt::format("{}: elastic node ranges are not supported by trainbox run", v->shown()),
                           fmt::format("pass a fixed count, e.g. --nnodes {} (torchrun runs elastic jobs)", hi));
        n.text = lo;
      }
      c.nnodes = static_cast<int>(integer_in(n, 1, 1 << 16, "pass the number of nodes, at least 1"));
    }
    if (auto v = pick(a.node_rank, "--node-rank", {"PET_NODE_RANK"}, env, sched.node_rank)) {
      auto r = parse_integer(v->text);
      if (!r || *r < 0 || *r >= c.nnodes)
        throw UsageError(fmt::format("{}: node ranks go from 0 to nnodes-1, and nnodes is {}", v->shown(), c.nnodes),
                         c.nnodes == 1 ? std::string("pass --nnodes with the number of nodes, or --node-rank 0")
                                       : fmt::format("pass --node-rank 0..{}", c.nnodes - 1));
      c.node_rank = static_cast<int>(*r);
    }
    if (auto v = pick(a.master_addr, "--master-addr", {"PET_MASTER_ADDR"}, env, sched.master_addr)) {
      if (v->text.empty() || v->text.find_first_of(" \t/") != std::string::npos)
        throw UsageError(fmt::format("{}: not a host name or address", v->shown()),
                         "pass the host of node rank 0, e.g. --master-addr 10.0.0.1");
      c.master_addr = v->text;
    }
    if (auto v = pick(a.master_port, "--master-port", {"PET_MASTER_PORT"}, env, sched.master_port))
      c.master_port = static_cast<int>(
          integer_in(*v, 1, 65535, "use a TCP port 1–65535, or --standalone to pick a free one"));
  }

  if (auto v = pick(a.max_restarts, "--max-restarts", {"PET_MAX_RESTARTS"}, env))
    c.max_restarts =
        static_cast<int>(integer_in(*v, 0, 1000000, "pass how often to restart after a failure, 0 or more"));
  if (auto v = pick(a.log_dir, "--log-dir", {"PET_LOG_DIR"}, env)) {
    c.log_dir = v->text;
    c.log_dir_given = true;
  }
  if (auto v = pick(a.redirects, "--redirects", {"PET_REDIRECTS"}, env)) c.redirects = parse_std(*v, c.nproc_per_node);
  if (auto v = pick(a.tee, "--tee", {"PET_TEE"}, env)) c.tee = parse_std(*v, c.nproc_per_node);
  if (auto v = pick(a.local_ranks_filter, "--local-ranks-filter", {"PET_LOCAL_RANKS_FILTER"}, env))
    c.local_ranks_filter = parse_rank_filter(*v, c.nproc_per_node);
  if (auto v = pick(a.run_id, "--run-id", {"PET_RUN_ID", "PET_RDZV_ID"}, env, sched.run_id))
    c.run_id = v->text;
  else if (c.standalone)
    c.run_id = random_run_id();  // torchrun --standalone: a fresh id per run
  if (auto v = pick(a.grace_period, "--grace-period", {"PET_GRACE_PERIOD"}, env)) {
    char* end = nullptr;
    errno = 0;
    double s = std::strtod(v->text.c_str(), &end);
    if (end == v->text.c_str() || *end != '\0' || errno != 0 || !std::isfinite(s) || s < 0)
      throw UsageError(fmt::format("{}: not a number of seconds ≥ 0", v->shown()),
                       "pass how long workers get between SIGTERM and SIGKILL, e.g. --grace-period 30");
    c.grace_period_s = s;
  }
  c.prefix = !(a.no_prefix || truthy(env("PET_NO_PREFIX")));

  c.command = a.command;
  if (c.command.empty() || c.command.front().empty())
    throw UsageError("no command to run",
                     "put it after --, e.g. trainbox run --nproc-per-node 2 -- python3 train.py");
  return c;
}

// --- the worker contract ---
std::string worker_dir(const RunConfig& cfg, int local_rank, int restart_count) {
  std::filesystem::path root = cfg.log_dir.empty()
                                   ? std::filesystem::temp_directory_path() / ("trainbox-run-" + cfg.run_id)
                                   : std::filesystem::path(cfg.log_dir);
  return (root / fmt::format("attempt_{}", restart_count) / std::to_string(cfg.global_rank(local_rank))).string();
}

bool sets_omp_num_threads(const RunConfig& cfg, const EnvLookup& env) {
  return cfg.nproc_per_node > 1 && !env("OMP_NUM_THREADS");
}

std::vector<std::pair<std::string, std::string>> worker_env(const RunConfig& cfg, int local_rank, int restart_count,
                                                            const EnvLookup& env) {
  auto s = [](auto v) { return std::to_string(v); };
  const int rank = cfg.global_rank(local_rank);
  std::vector<std::pair<std::string, std::string>> out = {
      {"LOCAL_RANK", s(local_rank)},
      {"RANK", s(rank)},
      {"GROUP_RANK", s(cfg.node_rank)},
      {"ROLE_RANK", s(rank)},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", s(cfg.nproc_per_node)},
      {"WORLD_SIZE", s(cfg.world_size())},
      {"GROUP_WORLD_SIZE", s(cfg.nnodes)},
      {"ROLE_WORLD_SIZE", s(cfg.world_size())},
      {"MASTER_ADDR", cfg.master_addr},
      {"MASTER_PORT", s(cfg.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", s(restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", s(cfg.max_restarts)},
      {"TORCHELASTIC_RUN_ID", cfg.run_id},
      // The launcher hosts no TCPStore: that needs c10d, i.e. linking torch, and the launcher
      // must not (it starts in milliseconds and works when torch is broken). So workers are
      // told to do what torchrun's static rendezvous did before agent stores: rank 0 hosts the
      // store at MASTER_ADDR:MASTER_PORT, everyone else connects to it.
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", worker_dir(cfg, local_rank, restart_count) + "/error.json"},
      // Lets NCCL abort a hung collective instead of blocking forever (torchrun's default).
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", env("TORCH_NCCL_ASYNC_ERROR_HANDLING").value_or("1")},
      // torchrun ≥ 2.5 exports the signals its agent stops on; ours stops on the same four.
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
      // Ours, not torchrun's: where a --json result goes (util/result_file.h). Per rank, even
      // if the user exported one: ranks sharing a path would overwrite each other, and the
      // launcher passes rank 0's on to the user's path anyway.
      {kResultFileEnv, worker_dir(cfg, local_rank, restart_count) + "/result.json"},
  };
  // N processes × all-cores OpenMP pools oversubscribe the CPU; torchrun's default is 1.
  if (sets_omp_num_threads(cfg, env)) out.emplace_back("OMP_NUM_THREADS", "1");
  return out;
}

}  // namespace trainbox::launch
