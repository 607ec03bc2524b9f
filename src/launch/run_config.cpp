#include <trainbox/launch/run_config.h>

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include <fmt/format.h>

#include <trainbox/env/nvml.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/process.h>
#include <trainbox/util/heartbeat.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/worker_error.h>

namespace trainbox::launch {

namespace {

// A value and where it came from, so errors can say "PET_NNODES=0" rather than just "0"
// (name: "--nnodes", "PET_NNODES", "SLURM_NNODES" …). Values are read by util/parse.h.
using Value = Given;

// --- schedulers: defaults for the node layout when torchrun's own variables are absent ---
struct SchedulerDefaults {
  std::string name;  // "", "slurm", "kubeflow"
  std::optional<Value> nproc_per_node, nnodes, node_rank, master_addr, master_port, run_id;
  std::optional<Value> rdzv_endpoint;  // for c10d without --rdzv-endpoint: the master's host and port
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
      if (list) s.master_addr = Value{first_host(list->text), list->name + " (first host)"};
    }
    s.master_port = from_env(env, "MASTER_PORT");
    if (!s.master_port) {
      // Every node of the job derives the same port without talking to the others (collisions
      // with Linux's ephemeral range, 32768–60999, are what the port check reports).
      if (auto id = parse_integer(job->text); id && *id >= 0)
        s.master_port = Value{std::to_string(slurm_master_port(*id)), "SLURM_JOB_ID (10000 + id % 50000)"};
    }
    s.run_id = job;
    // c10d under Slurm needs no endpoint either: the same host and port every node derives.
    if (s.master_addr && s.master_port)
      s.rdzv_endpoint = Value{s.master_addr->text + ":" + s.master_port->text,
                              fmt::format("{} and {}", s.master_addr->name, s.master_port->name)};
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

StdStreams parse_std(const Value& v, int nproc) {
  const std::string hint = "use 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank like 0:3,1:2";
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
  return static_cast<int>(parse_int(v, 1, 1 << 16, hint));
}

// "HOST[:PORT]", "[v6]:PORT"; port -1 when absent.
std::pair<std::string, int> parse_endpoint(const Value& v) {
  const std::string hint = "pass HOST or HOST:PORT, e.g. --rdzv-endpoint node1:29400";
  std::string t = trim(v.text), host = t, port;
  if (!t.empty() && t.front() == '[') {
    auto close = t.find(']');
    if (close == std::string::npos) throw UsageError(fmt::format("{}: '[' without ']'", v.shown()), hint);
    host = t.substr(1, close - 1);
    if (close + 1 < t.size()) {
      if (t[close + 1] != ':') throw UsageError(fmt::format("{}: junk after ']'", v.shown()), hint);
      port = t.substr(close + 2);
    }
  } else if (auto colon = t.rfind(':'); colon != std::string::npos && t.find(':') == colon) {
    host = t.substr(0, colon);
    port = t.substr(colon + 1);
  }
  if (host.empty() || host.find_first_of(" \t/") != std::string::npos)
    throw UsageError(fmt::format("{}: no host name or address", v.shown()), hint);
  if (port.empty()) return {host, -1};
  Value pv{port, v.name + " port", v.cli};
  return {host, static_cast<int>(parse_int(pv, 1, 65535, hint))};
}

// --rdzv-conf key=value,…: the timeouts of the c10d rendezvous and its heartbeats.
const std::vector<std::pair<std::string, double RdzvConfig::*>> kRdzvConfKeys = {
    {"join_timeout", &RdzvConfig::join_timeout_s},
    {"read_timeout", &RdzvConfig::read_timeout_s},
    {"heartbeat_interval", &RdzvConfig::heartbeat_interval_s},
    {"heartbeat_timeout", &RdzvConfig::heartbeat_timeout_s},
    {"last_call", &RdzvConfig::last_call_s},
    {"last_call_timeout", &RdzvConfig::last_call_s},  // torchelastic's name
    {"admit_backoff", &RdzvConfig::admit_backoff_s}};

// "join_timeout=600,read_timeout=60,…": r's timeouts as --rdzv-conf would set them (each field once).
std::string rdzv_conf_text(const RdzvConfig& r) {
  std::string out;
  for (std::size_t i = 0; i < kRdzvConfKeys.size(); ++i) {
    const auto& [key, field] = kRdzvConfKeys[i];
    if (i > 0 && kRdzvConfKeys[i - 1].second == field) continue;  // an alias of the key before
    out += fmt::format("{}{}={:g}", out.empty() ? "" : ",", key, r.*field);
  }
  return out;
}

void parse_rdzv_conf(const Value& v, RdzvConfig& r) {
  const auto& keys = kRdzvConfKeys;
  std::string accepted;
  for (const auto& k : keys) accepted += (accepted.empty() ? "" : ", ") + k.first;
  const std::string hint = fmt::format(
      "accepted keys: {} (seconds) and is_host (1 or 0), e.g. join_timeout=60,heartbeat_timeout=5", accepted);
  for (const auto& item : split(v.text, ',')) {
    auto eq = item.find('=');
    std::string key = trim(item.substr(0, eq));
    if (eq == std::string::npos)
      throw UsageError(fmt::format("{}: '{}' is not key=value", v.shown(), trim(item)), hint);
    if (key == "is_host") {  // torchrun's: this launcher hosts (1) or never hosts (0) the rendezvous
      r.is_host = parse_bool(Value{trim(item.substr(eq + 1)), v.name + " is_host"}, hint);
      continue;
    }
    auto it = std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; });
    if (it == keys.end()) throw UsageError(fmt::format("{}: unknown key '{}'", v.shown(), key), hint);
    r.*(it->second) = parse_seconds(Value{trim(item.substr(eq + 1)), v.name + " " + key}, 0.001, hint);
  }
  if (r.heartbeat_timeout_s <= r.heartbeat_interval_s)
    throw UsageError(fmt::format("{}: heartbeat_timeout ({:g} s) must exceed heartbeat_interval ({:g} s)", v.shown(),
                                 r.heartbeat_timeout_s, r.heartbeat_interval_s),
                     "a node is lost after several missed heartbeats, e.g. heartbeat_interval=1,heartbeat_timeout=5");
}

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first executable `name` in the colon-separated `path` list, "" when none.
std::string find_in_path_list(const std::string& name, const std::string& path) {
  for (const auto& dir : split(path, ':')) {
    std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return {};
}

// --- the rendezvous: where the launchers meet (c10d), or MASTER_ADDR:MASTER_PORT (static) ---
void resolve_endpoint(const Value& endpoint, RunConfig& c) {
  auto [host, port] = parse_endpoint(endpoint);
  if (c.c10d()) {
    c.rdzv.host = host;
    c.rdzv.port = port < 0 ? RdzvConfig{}.port : port;
  } else {
    // torchrun's static backend reads MASTER_ADDR:MASTER_PORT from the endpoint.
    if (port < 0)
      throw UsageError(
          fmt::format("{}: the static backend needs a port (it is MASTER_ADDR:MASTER_PORT)", endpoint.shown()),
          fmt::format("pass --rdzv-endpoint {}:{}, or --rdzv-backend c10d", host, kDefaultMasterPort));
    c.master_addr = host;
    c.master_port = port;
  }
}

}  // namespace

namespace {
constexpr std::pair<StallAction, std::string_view> kStallActions[] = {
    {StallAction::kDump, "dump"}, {StallAction::kKill, "kill"}, {StallAction::kRestart, "restart"}};
}  // namespace

std::string_view stall_action_name(StallAction a) {
  for (const auto& [action, name] : kStallActions)
    if (action == a) return name;
  return "?";
}

std::optional<StallAction> parse_stall_action(std::string_view name) {
  for (const auto& [action, known] : kStallActions)
    if (known == name) return action;
  return std::nullopt;
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
  return visible_device_count(process_env()("CUDA_VISIBLE_DEVICES"), physical);
}

// --- the whole config: the option table, resolved row by row ---
namespace {
// --nnodes N, or torchrun's MIN:MAX: an elastic job (c10d only); N:N is N.
void parse_nnodes(const Value& v, RunConfig& c) {
  Value n = v;
  std::optional<Value> hi;
  if (auto colon = n.text.find(':'); colon != std::string::npos) {
    hi = Value{trim(n.text.substr(colon + 1)), n.name + " MAX", n.cli};
    n.text = trim(n.text.substr(0, colon));
  }
  const char* hint = "pass the number of nodes, at least 1, or MIN:MAX with 1 <= MIN <= MAX";
  c.nnodes = static_cast<int>(parse_int(n, 1, 1 << 16, hint));
  if (hi) {
    const int max = static_cast<int>(parse_int(*hi, 1, 1 << 16, hint));
    if (max < c.nnodes)
      throw UsageError(fmt::format("{}: MIN {} is larger than MAX {}", v.shown(), c.nnodes, max), hint);
    if (max > c.nnodes) {
      if (!c.c10d())
        throw UsageError(fmt::format("{}: an elastic node range needs --rdzv-backend c10d", v.shown()),
                         "add --rdzv-backend c10d --rdzv-endpoint HOST:PORT, or pass a fixed --nnodes");
      c.nnodes_max = max;
      c.nnodes_min = c.nnodes;
    }
  }
}

const RunOption& option_named(std::string_view flag) {
  for (const auto& o : run_options())
    if (o.flag() == flag) return o;
  throw std::logic_error("no trainbox run option " + std::string(flag));  // a typo in this file
}

// The row one of whose names is `name` ("-n", "--nproc_per_node", "--nproc-per-node").
const RunOption& option_with_name(std::string_view name) {
  for (const auto& o : run_options())
    for (const auto& n : split(o.names, ','))
      if (n == name) return o;
  throw std::logic_error("no trainbox run option " + std::string(name));  // a program's typo
}

// --standalone is one node on 127.0.0.1: a node layout typed on the command line conflicts with
// it unless it says the same (`fine`); one from PET_* or a scheduler is ignored.
void standalone_conflict(const Value& v, std::initializer_list<std::string_view> fine) {
  if (!v.cli || std::find(fine.begin(), fine.end(), trim(v.text)) != fine.end()) return;
  throw UsageError(fmt::format("--standalone conflicts with {} {}", v.name, v.text),
                   "--standalone runs one node on 127.0.0.1 with a free port; drop one of them");
}

// An explicit value the rendezvous overrides: worth a note, unlike a scheduler's default.
bool explicit_value(const Value& v) { return v.cli || starts_with(v.name, "PET_"); }

std::string num(double x) { return fmt::format("{:g}", x); }
}  // namespace

RunArgs& RunArgs::set(std::string_view name, std::string text) {
  given[std::string(option_with_name(name).flag())] = std::move(text);
  return *this;
}

RunArgs& RunArgs::unset(std::string_view name) {
  given.erase(std::string(option_with_name(name).flag()));
  return *this;
}

std::optional<std::string> RunArgs::get(std::string_view name) const {
  const auto it = given.find(option_with_name(name).flag());
  return it == given.end() ? std::nullopt : std::optional<std::string>(it->second);
}

// What the rows' handlers share while one config is resolved.
struct RunResolution {
  RunResolution(const RunArgs& a, const EnvLookup& e) : args(a), env(e) {}
  const RunArgs& args;
  const EnvLookup& env;
  RunConfig c;

  // The value of `o` from its first source: the CLI, its variables, the scheduler.
  std::optional<Value> given(const RunOption& o) {
    if (auto it = args.given.find(o.flag()); it != args.given.end())
      return Value{it->second, std::string(o.flag()), true};
    if (auto v = env_of(o)) return v;
    return o.from_scheduler ? o.from_scheduler(*this) : std::nullopt;
  }
  std::optional<Value> given(std::string_view flag) { return given(option_named(flag)); }
  // A switch: given, and not off (PET_MODULE=garbage is off, as in torchrun).
  bool on(std::string_view flag) {
    auto v = given(flag);
    return v && is_truthy(v->text);
  }
  // Its variables only (trimmed; an empty one is unset).
  std::optional<Value> env_of(const RunOption& o) const {
    for (const auto& name : split(o.env, ','))
      if (auto v = from_env(env, name)) return v;
    return std::nullopt;
  }
  // Detected on first use, once --standalone (the first row) is known: it ignores schedulers.
  const SchedulerDefaults& scheduler() {
    if (!scheduler_) scheduler_ = c.standalone ? SchedulerDefaults{} : detect_scheduler(env);
    return *scheduler_;
  }

 private:
  std::optional<SchedulerDefaults> scheduler_;
};

// The table. Rows are resolved top to bottom (a handler may read what the rows above it set:
// --node-rank checks nnodes, --redirects checks nproc_per_node), and --help and the docs list
// them in this order. A section a function (as the config keys' table); one row a field each, laid out
// as the reference it generates.
// clang-format off
namespace {
using C = RunConfig;
using R = RunResolution;

// Where the workers run: the node layout.
std::vector<RunOption> placement_options() {
  return {
    {.names = "--standalone", .toggle = true, .env = "PET_STANDALONE",
     .help = "One node on 127.0.0.1 with a free port (no --master-* needed)",
     .apply = [](const Value& v, R& r) {
       r.c.standalone = is_truthy(v.text);
       if (r.c.standalone) r.c.master_port = 0;  // launch() picks a free one
     }},
    {.names = "-n,--nproc-per-node,--nproc_per_node", .value_hint = "N|gpu|cpu|auto",
     .env = "PET_NPROC_PER_NODE", .scheduler = "Slurm: SLURM_NTASKS_PER_NODE",
     .from_scheduler = [](R& r) { return r.scheduler().nproc_per_node; },
     .default_of = [](const C& c) { return std::to_string(c.nproc_per_node); },
     .help = "Workers on this node: a count, gpu (the visible NVIDIA GPUs), cpu (the hardware threads this process may use) or auto (gpu if there are any, else cpu)",
     .apply = [](const Value& v, R& r) {
       const std::string t = trim(v.text);
       const bool needs_gpus = t == "gpu" || t == "auto";
       r.c.nproc_per_node = resolve_nproc_from(v, needs_gpus ? visible_gpu_count() : 0, affinity_cpu_count());
     }},
    {.names = "--rdzv-backend,--rdzv_backend", .value_hint = "static|c10d",
     .env = "PET_RDZV_BACKEND",
     .default_of = [](const C& c) { return c.rdzv_backend; },
     .help = "static (each node passes --node-rank) or c10d (nodes meet at --rdzv-endpoint, which picks node ranks and the master, fails and restarts all nodes together)",
     .apply = [](const Value& v, R& r) {
       const std::string b = trim(v.text);
       if (b != "static" && b != "c10d")
         throw UsageError(fmt::format("{}: not supported by trainbox run", v.shown()),
                          "use c10d (the launchers meet at --rdzv-endpoint) or static (each node passes --node-rank)");
       if (r.c.standalone)
         r.c.notes.push_back(fmt::format("{} is ignored with --standalone (one node on 127.0.0.1)", v.shown()));
       else
         r.c.rdzv_backend = b;
     }},
    {.names = "--nnodes", .value_hint = "N|MIN:MAX",
     .env = "PET_NNODES", .scheduler = "Slurm: SLURM_NNODES or SLURM_JOB_NUM_NODES; Kubeflow: WORLD_SIZE",
     .from_scheduler = [](R& r) { return r.scheduler().nnodes; },
     .default_of = [](const C& c) { return std::to_string(c.nnodes); },
     .help = "Number of nodes; MIN:MAX is an elastic job (c10d)",
     .apply = [](const Value& v, R& r) {
       if (r.c.standalone) return standalone_conflict(v, {"1", "1:1"});
       parse_nnodes(v, r.c);
     }},
    {.names = "--node-rank,--node_rank", .value_hint = "RANK",
     .env = "PET_NODE_RANK", .scheduler = "Slurm: SLURM_NODEID; Kubeflow: RANK",
     .from_scheduler = [](R& r) { return r.scheduler().node_rank; },
     .default_of = [](const C& c) { return std::to_string(c.node_rank); },
     .help = "This node's rank, 0..nnodes-1 (static; c10d assigns it)",
     .apply = [](const Value& v, R& r) {
       if (r.c.standalone) return standalone_conflict(v, {"0"});
       if (r.c.c10d()) {
         // Decision: accepted and ignored (torchrun does the same), so a torchrun command line
         // that still carries --node-rank works; the note says where ranks come from instead.
         if (explicit_value(v))
           r.c.notes.push_back(
               fmt::format("{} is ignored with --rdzv-backend c10d: the rendezvous assigns node ranks", v.shown()));
         return;
       }
       const int n = r.c.nnodes;
       auto rank = parse_integer(v.text);
       if (!rank || *rank < 0 || *rank >= n)
         throw UsageError(fmt::format("{}: node ranks go from 0 to nnodes-1, and nnodes is {}", v.shown(), n),
                          n == 1 ? std::string("pass --nnodes with the number of nodes, or --node-rank 0")
                                 : fmt::format("pass --node-rank 0..{}", n - 1));
       r.c.node_rank = static_cast<int>(*rank);
     }},
    {.names = "--master-addr,--master_addr", .value_hint = "HOST",
     .env = "PET_MASTER_ADDR", .scheduler = "Slurm: MASTER_ADDR, else the first host of SLURM_JOB_NODELIST; Kubeflow: MASTER_ADDR",
     .from_scheduler = [](R& r) { return r.scheduler().master_addr; },
     .default_of = [](const C& c) { return c.master_addr; },
     .help = "Host of node rank 0, where rank 0 hosts the c10d store (static; c10d picks it)",
     .apply = [](const Value& v, R& r) {
       if (r.c.standalone) {
         if (!r.args.get("--master-port")) standalone_conflict(v, {});  // with both, the error names --master-port
         return;
       }
       if (r.c.c10d() && v.cli)
         r.c.notes.push_back(fmt::format("{} is ignored with --rdzv-backend c10d: node rank 0 picks MASTER_ADDR and MASTER_PORT", v.shown()));
       if (v.text.empty() || v.text.find_first_of(" \t/") != std::string::npos)
         throw UsageError(fmt::format("{}: not a host name or address", v.shown()),
                          "pass the host of node rank 0, e.g. --master-addr 10.0.0.1");
       r.c.master_addr = v.text;
     }},
    {.names = "--master-port,--master_port", .value_hint = "PORT",
     .env = "PET_MASTER_PORT", .scheduler = "Slurm: MASTER_PORT, else 10000 + SLURM_JOB_ID % 50000; Kubeflow: MASTER_PORT",
     .from_scheduler = [](R& r) { return r.scheduler().master_port; },
     .default_of = [](const C& c) { return std::to_string(c.master_port); },
     .help = "Port of that store (static; c10d picks a free one)",
     .apply = [](const Value& v, R& r) {
       if (r.c.standalone) return standalone_conflict(v, {});
       if (r.c.c10d() && v.cli)
         r.c.notes.push_back(fmt::format("{} is ignored with --rdzv-backend c10d: node rank 0 picks MASTER_ADDR and MASTER_PORT", v.shown()));
       r.c.master_port = static_cast<int>(parse_int(v, 1, 65535, "use a TCP port 1–65535, or --standalone to pick a free one"));
     }},
  };
}

// C10d: the launchers meet, agree, fail and restart together.
std::vector<RunOption> rendezvous_options() {
  return {
    {.names = "--rdzv-endpoint,--rdzv_endpoint", .value_hint = "HOST[:PORT]",
     .env = "PET_RDZV_ENDPOINT", .scheduler = "Slurm (c10d): the master's host and port",
     .from_scheduler = [](R& r) -> std::optional<Value> { return r.c.c10d() ? r.scheduler().rdzv_endpoint : std::nullopt; },
     .default_of = [](const C& c) { return fmt::format("port {}", c.rdzv.port); },
     .help = "c10d: where the launchers meet; the launcher on HOST hosts the rendezvous and becomes node rank 0. static: MASTER_ADDR:MASTER_PORT",
     .apply = [](const Value& v, R& r) {
       if (!r.c.standalone) return resolve_endpoint(v, r.c);
       if (!r.given("--rdzv-backend"))  // one note for both
         r.c.notes.push_back(fmt::format("{} is ignored with --standalone (one node on 127.0.0.1)", v.shown()));
     },
     .absent = [](R& r) {
       if (r.c.c10d())
         throw UsageError("--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]",
                          "pass the host every node can reach, e.g. --rdzv-endpoint node1:29400 (its launcher hosts the rendezvous)");
     }},
    {.names = "--rdzv-conf,--rdzv_conf", .value_hint = "KEY=VALUE,…",
     .env = "PET_RDZV_CONF",
     .default_of = [](const C& c) { return rdzv_conf_text(c.rdzv); },
     .help = "c10d settings: the timeouts in seconds (last_call and admit_backoff: elastic jobs; last_call_timeout = last_call), and is_host=1|0 (host the rendezvous, or never)",
     .apply = [](const Value& v, R& r) { parse_rdzv_conf(v, r.c.rdzv); }},
    {.names = "--monitor-interval,--monitor_interval", .value_hint = "SECONDS",
     .env = "PET_MONITOR_INTERVAL",
     .default_of = [](const C& c) { return num(c.monitor_interval_s); },
     .help = "Accepted for torchrun compatibility (trainbox run reacts to worker exits at once)",
     .apply = [](const Value& v, R& r) {
       r.c.monitor_interval_s = parse_seconds(v, 0.001, "pass seconds, e.g. --monitor-interval 0.1");
     }},
    {.names = "--local-addr,--local_addr", .value_hint = "ADDR",
     .env = "PET_LOCAL_ADDR",
     .help = "This node's address as the other nodes reach it (c10d; default: the address it reaches the endpoint from)",
     .apply = [](const Value& v, R& r) {
       if (v.text.find_first_of(" \t/") != std::string::npos)
         throw UsageError(fmt::format("{}: not a host name or address", v.shown()),
                          "pass the address the other nodes reach this one at, e.g. --local-addr 10.0.0.2");
       r.c.rdzv.local_addr = v.text;
     }},
  };
}

// Failures, logs and the workers' environment.
std::vector<RunOption> job_options() {
  return {
    {.names = "--max-restarts,--max_restarts", .value_hint = "N",
     .env = "PET_MAX_RESTARTS",
     .default_of = [](const C& c) { return std::to_string(c.max_restarts); },
     .help = "Restart all workers up to N times after a failure",
     .apply = [](const Value& v, R& r) {
       r.c.max_restarts = static_cast<int>(parse_int(v, 0, 1000000, "pass how often to restart after a failure, 0 or more"));
     }},
    {.names = "--log-dir,--log_dir", .value_hint = "DIR",
     .env = "PET_LOG_DIR",
     .help = "Write DIR/attempt_<n>/<rank>/{stdout,stderr}.log and error.json (default: error files only, in a temporary folder)",
     .apply = [](const Value& v, R& r) {
       r.c.log_dir = v.text;
       r.c.log_dir_given = true;
     }},
    {.names = "-r,--redirects", .value_hint = "0-3|RANK:0-3,…",
     .env = "PET_REDIRECTS",
     .default_of = [](const C& c) { return std::to_string(c.redirects.all); },
     .help = "Send streams to the log files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:3,1:2",
     .apply = [](const Value& v, R& r) { r.c.redirects = parse_std(v, r.c.nproc_per_node); }},
    {.names = "-t,--tee", .value_hint = "0-3|RANK:0-3,…",
     .env = "PET_TEE",
     .default_of = [](const C& c) { return std::to_string(c.tee.all); },
     .help = "Send streams to the console and the log files (same values as --redirects)",
     .apply = [](const Value& v, R& r) { r.c.tee = parse_std(v, r.c.nproc_per_node); }},
    {.names = "--local-ranks-filter,--local_ranks_filter", .value_hint = "RANK,…",
     .env = "PET_LOCAL_RANKS_FILTER",
     .help = "Show only these local ranks on the console, e.g. 0,2 (default: all; log files get every rank)",
     .apply = [](const Value& v, R& r) { r.c.local_ranks_filter = parse_rank_filter(v, r.c.nproc_per_node); }},
    {.names = "--run-id,--run_id,--rdzv-id,--rdzv_id", .value_hint = "ID",
     .env = "PET_RUN_ID,PET_RDZV_ID", .scheduler = "Slurm: SLURM_JOB_ID",
     .from_scheduler = [](R& r) { return r.scheduler().run_id; },
     .default_of = [](const C& c) { return c.run_id; },
     .help = "Job id: TORCHELASTIC_RUN_ID for the workers; with c10d, every node must pass the same; --standalone: a fresh random one",
     .apply = [](const Value& v, R& r) { r.c.run_id = v.text; },
     .absent = [](R& r) {
       if (r.c.standalone) r.c.run_id = random_run_id();  // torchrun --standalone: a fresh id per run
     }},
    {.names = "--role", .value_hint = "NAME",
     .env = "PET_ROLE",
     .default_of = [](const C& c) { return c.role; },
     .help = "The workers' role, their ROLE_NAME (torchrun's --role)",
     .apply = [](const Value& v, R& r) {
       if (trim(v.text).empty())
         throw UsageError(fmt::format("{} '{}': the role has no name", v.name, v.text), "pass a name, e.g. --role trainer, or leave it out");
       r.c.role = trim(v.text);
     }},
    {.names = "--grace-period,--grace_period", .value_hint = "SECONDS",
     .env = "PET_GRACE_PERIOD",
     .default_of = [](const C& c) { return num(c.grace_period_s); },
     .help = "Seconds between SIGTERM and SIGKILL when stopping workers",
     .apply = [](const Value& v, R& r) {
       r.c.grace_period_s = parse_seconds(v, 0, "pass how long workers get between SIGTERM and SIGKILL, e.g. --grace-period 30");
     }},
    {.names = "--no-prefix,--no_prefix", .toggle = true, .env = "PET_NO_PREFIX",
     .help = "Do not prefix console lines with [rank N]",
     .apply = [](const Value& v, R& r) {
       if (is_truthy(v.text)) r.c.prefix = false;
     }},
  };
}

// Hangs (launch/stall.h).
std::vector<RunOption> stall_options() {
  return {
    {.names = "--stall-timeout,--stall_timeout", .value_hint = "SECONDS",
     .env = "TRAINBOX_STALL_TIMEOUT",
     .default_of = [](const C& c) { return num(c.stall_timeout_s); },
     .help = "Seconds without progress after which a worker that reports heartbeats is stalled (0 = off; workers that never report are never judged)",
     .apply = [](const Value& v, R& r) {
       r.c.stall_timeout_s = parse_seconds(v, 0, "pass seconds, e.g. --stall-timeout 120 (0 turns stall detection off)");
     }},
    {.names = "--on-stall,--on_stall", .value_hint = "dump|kill|restart",
     .env = "TRAINBOX_ON_STALL",
     .default_of = [](const C& c) { return std::string(stall_action_name(c.on_stall)); },
     .help = "On a stall: dump (stacks, keep running), kill (stacks, stop, exit 124) or restart (under --max-restarts)",
     .apply = [](const Value& v, R& r) {
       const auto action = parse_stall_action(v.text);
       if (!action) throw UsageError(fmt::format("{}: not an action", v.shown()), "use dump, kill or restart");
       r.c.on_stall = *action;
     }},
    {.names = "--stack-timeout,--stack_timeout", .value_hint = "SECONDS",
     .env = "TRAINBOX_STACK_TIMEOUT",
     .default_of = [](const C& c) { return num(c.stack_timeout_s); },
     .help = "Seconds each stack tool (eu-stack, py-spy) gets per worker before it is abandoned",
     .apply = [](const Value& v, R& r) {
       r.c.stack_timeout_s = parse_seconds(v, 0.1, "pass seconds, e.g. --stack-timeout 10");
     }},
  };
}

// The dashboard (dashboard/dashboard.h, docs/dashboard.md).
std::vector<RunOption> dashboard_options() {
  return {
    {.names = "--dashboard", .value_hint = "[ADDR:]PORT",
     .help = "Serve a live page of the job, /metrics (Prometheus) and /api/state at [ADDR:]PORT (default address 127.0.0.1; any other needs a token)",
     .apply = [](const Value& v, R& r) {
       // --dashboard-token, else its variable (also when --dashboard-token is "": an unset "$TOKEN")
       const auto env_token = r.env_of(option_named("--dashboard-token"));
       r.c.dashboard = dashboard::resolve_dashboard(v.text, r.args.get("--dashboard-token").value_or(""), env_token ? env_token->text : "");
       const auto run_dir = r.given("--dashboard-run-dir");
       r.c.dashboard.run_dir = dashboard::run_dir_of(r.args.command, run_dir ? run_dir->text : "");
     }},
    {.names = "--dashboard-token", .value_hint = "TOKEN",
     .env = dashboard::kDashboardTokenEnv,
     .help = "Token the dashboard asks for (?token= or Authorization: Bearer); read by --dashboard"},
    {.names = "--dashboard-run-dir", .value_hint = "DIR",
     .help = "Where rank 0 writes metrics.jsonl, for the curves (default: the command's --run-dir, else the newest ./runs/*); read by --dashboard"},
  };
}

// The command, as torchrun runs it (read by resolve_run_config's command stage).
std::vector<RunOption> command_options() {
  return {
    {.names = "-m,--module", .toggle = true, .env = "PET_MODULE",
     .help = "The command is a Python module: run `python -m MODULE ARGS…`"},
    {.names = "--no-python,--no_python", .toggle = true, .env = "PET_NO_PYTHON",
     .help = "Run the command as given, even a .py script (default: a first word ending in .py runs through $TRAINBOX_PYTHON, else python3 on PATH, else the python3 next to trainbox)"},
    {.names = "--no-instrument,--no_instrument", .toggle = true,
     .help = "Do not report a Python worker's phases (data, forward, backward, allreduce, optimizer, checkpoint) as heartbeats (default: reported, without a line of the script changed)"},
  };
}

}  // namespace
// clang-format on

const std::vector<RunOption>& run_options() {
  static const std::vector<RunOption> kOptions = [] {
    std::vector<RunOption> all;
    for (auto section :
         {placement_options, rendezvous_options, job_options, stall_options, dashboard_options, command_options})
      for (auto& o : section()) all.push_back(std::move(o));
    return all;
  }();
  return kOptions;
}

std::string_view RunOption::flag() const {
  for (std::string_view rest = names; !rest.empty();) {
    const auto comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    if (starts_with(name, "--")) return name;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return names;
}

std::string RunOption::default_text() const {
  if (toggle) return "off";
  return default_of ? default_of(RunConfig{}) : std::string();
}

namespace {
// "PET_RUN_ID or PET_RDZV_ID"
std::string env_names(const RunOption& o, const char* quote) {
  std::string out;
  for (const auto& name : split(o.env, ','))
    out += fmt::format("{}{}{}{}", out.empty() ? "" : " or ", quote, name, quote);
  return out;
}
}  // namespace

std::string RunOption::help_text() const {
  std::vector<std::string> parts;
  if (!toggle && default_of) parts.push_back("default " + default_text());
  if (!env.empty()) parts.push_back("env " + env_names(*this, ""));
  if (!scheduler.empty()) parts.push_back("else " + std::string(scheduler));
  std::string out(help);
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? " (" : "; ") + parts[i];
  return parts.empty() ? out : out + ")";
}

std::string run_options_markdown() {
  auto cell = [](std::string_view t) {
    std::string r;
    for (char ch : t) r += ch == '|' || ch == '<' ? std::string("\\") + ch : std::string(1, ch);  // a cell, not HTML
    return r;
  };
  std::string out =
      "| option | value | default | environment, then scheduler | what it does |\n|---|---|---|---|---|\n";
  for (const auto& o : run_options()) {
    std::string names = fmt::format("`{}`", o.flag());
    for (const auto& n : split(o.names, ','))
      if (n != o.flag()) names += fmt::format(", `{}`", n);
    std::string sources = env_names(o, "`");
    if (!o.scheduler.empty()) sources += (sources.empty() ? "" : "; ") + cell(o.scheduler);
    const std::string def = o.default_text();
    out +=
        fmt::format("| {} | {} | {} | {} | {} |\n", names, o.value_hint.empty() ? "" : "`" + cell(o.value_hint) + "`",
                    def.empty() ? "" : "`" + cell(def) + "`", sources.empty() ? "—" : sources, cell(o.help));
  }
  return out;
}

RunConfig resolve_run_config(const RunArgs& a, const EnvLookup& env) {
  RunResolution r(a, env);
  for (const auto& o : run_options()) {
    if (!o.apply) continue;  // read by another row's handler or the command stage
    if (auto v = r.given(o))
      o.apply(*v, r);
    else if (o.absent)
      o.absent(r);
  }
  RunConfig& c = r.c;
  c.scheduler = r.scheduler().name;

  // --- the command, as torchrun runs it ---
  c.command = a.command;
  if (c.command.empty() || c.command.front().empty())
    throw UsageError("no command to run", "put it after --, e.g. trainbox run --nproc-per-node 2 -- python3 train.py");
  const bool module = r.on("--module");
  const bool no_python = r.on("--no-python");
  if (module && no_python)
    throw UsageError("-m and --no-python cannot be used together",
                     "-m runs `python -m MODULE`, --no-python runs the command as given: pick one");
  if (module || (!no_python && has_suffix(c.command.front(), ".py"))) {
    PythonChoice choice;
    if (!module) choice.script = c.command.front();
    choice.build_python = kBuildPython;
    choice.notes = &c.notes;
    std::vector<std::string> prefix = {resolve_python(env, self_exe_dir(), choice)};
    if (module) prefix.push_back("-m");
    c.command.insert(c.command.begin(), prefix.begin(), prefix.end());
  }
  if (!r.on("--no-instrument") && is_python_command(c.command)) c.python_boot = find_python_boot(self_exe_dir());
  if (c.c10d()) c.job_digest = job_digest(c.command, a.worker_keys);
  return c;
}

#ifndef TRAINBOX_BUILD_PYTHON
#define TRAINBOX_BUILD_PYTHON ""
#endif
const char* const kBuildPython = TRAINBOX_BUILD_PYTHON;

bool imports_torch(const std::string& source) {
  auto is_torch = [](const std::string& module) { return module == "torch" || starts_with(module, "torch."); };
  for (const auto& raw : split(source, '\n')) {
    std::string line = trim(raw.substr(0, raw.find('#')));
    if (starts_with(line, "from ")) {  // from torch.nn import Linear
      if (is_torch(trim(line.substr(5)).substr(0, trim(line.substr(5)).find(' ')))) return true;
    } else if (starts_with(line, "import ")) {  // import os, torch.distributed as dist
      for (const auto& item : split(line.substr(7), ','))
        if (is_torch(trim(item).substr(0, trim(item).find(' ')))) return true;
    }
  }
  return false;
}

std::string resolve_python(const EnvLookup& env, const std::string& self_dir, const PythonChoice& choice) {
  const std::string path = env("PATH").value_or("");
  if (auto p = env("TRAINBOX_PYTHON"); p && !trim(*p).empty()) {
    std::string t = trim(*p);
    std::string found = t.find('/') == std::string::npos ? find_in_path_list(t, path) : t;
    if (!found.empty() && is_executable_file(found)) return found;
    throw UsageError(fmt::format("TRAINBOX_PYTHON={} is not an executable program", t),
                     "point it at a Python interpreter, or unset it to use python3 from PATH");
  }
  const std::string on_path = find_in_path_list("python3", path);
  const bool wants_torch =
      !choice.script.empty() && imports_torch(read_file(choice.script).value_or("").substr(0, 1 << 20));
  auto note = [&](std::string line) {
    if (choice.notes) choice.notes->push_back(std::move(line));
  };
  if (wants_torch && !choice.build_python.empty() && is_executable_file(choice.build_python)) {
    if (choice.build_python != on_path)
      note(
          fmt::format("{} imports torch: running it with {}, the Python trainbox was built against{} (set "
                      "TRAINBOX_PYTHON to choose another)",
                      choice.script, choice.build_python, on_path.empty() ? "" : ", not " + on_path + " from PATH"));
    return choice.build_python;
  }
  if (!on_path.empty()) {
    if (wants_torch) {
      // find_spec, not import: tens of milliseconds instead of a second or more
      auto r = run_capture({on_path, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"});
      if (r.exit_code == 1)
        note(
            fmt::format("{} imports torch, but {} (python3 from PATH) cannot import it; set TRAINBOX_PYTHON to a "
                        "Python that has torch (e.g. the venv trainbox was built with)",
                        choice.script, on_path));
    }
    return on_path;
  }
  if (!self_dir.empty() && is_executable_file(self_dir + "/python3")) return self_dir + "/python3";
  throw UsageError(fmt::format("no Python to run the script: TRAINBOX_PYTHON is unset, no python3 is on PATH, and "
                               "none is next to trainbox in {}",
                               self_dir.empty() ? "?" : self_dir),
                   "set TRAINBOX_PYTHON=/path/to/python3, or pass --no-python to run the command as given");
}

// --- the worker contract ---
std::string worker_dir(const RunConfig& cfg, int local_rank, int restart_count) {
  std::filesystem::path root = cfg.log_dir.empty()
                                   ? std::filesystem::temp_directory_path() / ("trainbox-run-" + cfg.run_id)
                                   : std::filesystem::path(cfg.log_dir);
  return (root / fmt::format("attempt_{}", restart_count) / std::to_string(cfg.global_rank(local_rank))).string();
}

std::string flight_recorder_prefix(const RunConfig& cfg, int restart_count) {
  return (std::filesystem::path(worker_dir(cfg, 0, restart_count)).parent_path() / "nccl_trace_rank_").string();
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
      {"ROLE_NAME", cfg.role},
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
      // Ours: a trainbox worker's usage error (exit 2) goes into that file only, and this
      // launcher says it once for the job (outcome.h, usage_error_line; util/worker_error.h).
      {kLauncherSaysUsageErrorsEnv, "1"},
      // Lets NCCL abort a hung collective instead of blocking forever (torchrun's default).
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", env("TORCH_NCCL_ASYNC_ERROR_HANDLING").value_or("1")},
      // torchrun ≥ 2.5 exports the signals its agent stops on; ours stops on the same four.
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
      // Ours, not torchrun's: where a --json result goes (util/result_file.h). Per rank, even
      // if the user exported one: ranks sharing a path would overwrite each other, and the
      // launcher passes rank 0's on to the user's path anyway.
      {kResultFileEnv, worker_dir(cfg, local_rank, restart_count) + "/result.json"},
      // Ours: progress for stall detection (util/heartbeat.h), per rank like the result file.
      {kHeartbeatEnv, worker_dir(cfg, local_rank, restart_count) + "/heartbeat"},
  };
  // NCCL's flight recorder, on by default (PyTorch has it off): on a collective timeout every
  // rank dumps its last collectives into the attempt's folder, and the failure summary lists
  // the dumps. A value the user set (old or new name) wins.
  // torch 2.11's names (TORCH_FR_*; the old TORCH_NCCL_TRACE_BUFFER_SIZE and
  // TORCH_NCCL_DEBUG_INFO_TEMP_FILE still work but print a deprecation warning on every rank).
  if (!env("TORCH_NCCL_TRACE_BUFFER_SIZE") && !env("TORCH_FR_BUFFER_SIZE"))
    out.emplace_back("TORCH_FR_BUFFER_SIZE", "2000");
  if (!env("TORCH_NCCL_DUMP_ON_TIMEOUT")) out.emplace_back("TORCH_NCCL_DUMP_ON_TIMEOUT", "1");
  if (!env("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") && !env("TORCH_FR_DUMP_TEMP_FILE"))
    out.emplace_back("TORCH_FR_DUMP_TEMP_FILE", flight_recorder_prefix(cfg, restart_count));
  // Ours: an elastic job's node range, so `trainbox train` keeps the global batch (util/job_env.h).
  if (cfg.elastic())
    out.emplace_back(kElasticNnodesEnv, fmt::format("{}:{}", std::max(1, cfg.nnodes_min), cfg.nnodes_max));
  // N processes × all-cores OpenMP pools oversubscribe the CPU; torchrun's default is 1.
  if (sets_omp_num_threads(cfg, env)) out.emplace_back("OMP_NUM_THREADS", "1");
  add_python_instrumentation(cfg, env, out);  // Python workers: zero-code heartbeats
  return out;
}

}  // namespace trainbox::launch
