// trainbox/launch/run_config.h — what `trainbox run` launches, and the environment each worker gets.
//
// Every option is declared once, in run_options() (a RunOption: flag and aliases, the PET_/TRAINBOX_
// variables, the scheduler's fallback, the default read from RunConfig{}, help, and the handler
// that parses it through util/parse.h). `trainbox run --help`, docs/distributed.md's option table
// (run_options_markdown, `trainbox run --help-markdown`) and resolve_run_config all read it.
// RunConfig is resolved from, in this order (the first source with a value wins):
//   1. the CLI (torchrun's option names),
//   2. torchrun's PET_<NAME> variables (PET_NPROC_PER_NODE, PET_NNODES, PET_NODE_RANK,
//      PET_MASTER_ADDR, PET_MASTER_PORT, PET_MAX_RESTARTS, PET_RUN_ID or PET_RDZV_ID, …),
//   3. the scheduler, when one is detected:
//        Slurm (SLURM_JOB_ID set): SLURM_NNODES, SLURM_NODEID, SLURM_NTASKS_PER_NODE, the first
//        host of SLURM_JOB_NODELIST, MASTER_ADDR/MASTER_PORT if exported, else port
//        10000 + SLURM_JOB_ID % 50000 (util/job_env.h, shared with the workers' WorkerEnv);
//        Kubeflow PyTorchJob (MASTER_ADDR, WORLD_SIZE, RANK set, no LOCAL_RANK, inside
//        Kubernetes or with PET_NNODES): WORLD_SIZE = nodes, RANK = node rank, MASTER_PORT,
//   4. RunConfig's defaults, which are torchrun's (1 process, 1 node, 127.0.0.1:kDefaultMasterPort,
//      0 restarts, run id "none").
// The command, as torchrun runs it: a first word ending in ".py" runs through Python
// (resolve_python: $TRAINBOX_PYTHON, the build's Python for a script importing torch, python3
// on PATH, the python3 next to trainbox),
// -m MODULE runs `python -m MODULE`, --no-python (or any other first word) runs it as given.
// --rdzv-backend c10d takes node ranks and the master address from the rendezvous: an explicit
// --node-rank/--master-addr/--master-port is ignored with a note (RunConfig::notes).
// Bad values throw trainbox::UsageError naming the value, where it came from and the fix.
// resolve_run_config() and worker_env() are pure given an EnvLookup (tests pass a map).
//
// worker_env() returns exactly torchrun's worker variables (docs: distributed-facts.md),
// so workers written for torchrun run unchanged:
//   RunArgs a; a.nproc_per_node = "2"; a.command = {"python3", "train.py"};
//   RunConfig cfg = resolve_run_config(a);                 // reads the process environment
//   for (const auto& [k, v] : worker_env(cfg, /*local_rank=*/1, /*restart_count=*/0))
//     setenv(k.c_str(), v.c_str(), 1);                      // RANK=1, WORLD_SIZE=2, …
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <trainbox/dashboard/dashboard.h>
#include <trainbox/launch/job_digest.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/parse.h>

namespace trainbox::launch {

// How variables are read (util/job_env.h): the process environment, or a map in tests.
using trainbox::EnvLookup;
using trainbox::map_env;
using trainbox::process_env;

// torchrun's Std for --redirects / --tee: bit 1 = stdout, bit 2 = stderr (0 none … 3 both),
// either for every local rank ("3") or per local rank ("0:3,1:2"; unlisted ranks get 0).
inline constexpr int kStdout = 1;
inline constexpr int kStderr = 2;
struct StdStreams {
  int all = 0;
  std::map<int, int> by_local_rank;
  int of(int local_rank) const;
};

// What trainbox run does on a stall (--on-stall / TRAINBOX_ON_STALL), parsed once when the
// config is resolved: "dump", "kill", "restart" (the names stall_action_name gives back).
enum class StallAction { kDump, kKill, kRestart };
std::string_view stall_action_name(StallAction a);
std::optional<StallAction> parse_stall_action(std::string_view name);  // nullopt: not one of the three

// The CLI's values as typed, before any environment fallback: each option given, by its row's
// flag ("--nproc-per-node"), with its text ("1" for a switch). set()/unset()/get() take any of
// the row's names ("-n", "--nproc_per_node"); a name no row has is a program's bug
// (std::logic_error). Nothing here names an option: a new one is a row of run_options() alone.
struct RunArgs {
  std::map<std::string, std::string, std::less<>> given;
  std::vector<std::string> command;
  // c10d: reads the config of a worker command trainbox understands (the CLI's, for `trainbox
  // train`), so the job digest compares its keys (launch/job_digest.h); unset: the command only.
  WorkerKeysReader worker_keys;

  RunArgs& set(std::string_view name, std::string text = "1");
  RunArgs& unset(std::string_view name);
  std::optional<std::string> get(std::string_view name) const;
};

// --rdzv-backend c10d: the launchers meet at --rdzv-endpoint (launch/rendezvous.h) and agree on
// node ranks, MASTER_ADDR/MASTER_PORT, failures and restarts. --rdzv-conf sets the timeouts.
struct RdzvConfig {
  std::string host;                 // --rdzv-endpoint HOST
  int port = 29400;                 // …:PORT (torchrun's c10d default)
  double join_timeout_s = 600;      // all nodes must have joined by then (torchrun's default)
  double read_timeout_s = 60;       // any other answer the launcher waits for (torchrun's default)
  double heartbeat_interval_s = 1;  // ours: how often each side says it is alive
  double heartbeat_timeout_s = 5;   // ours: silence after which a node is lost (≤ 10 s: issue 10)
  // Elastic (--nnodes MIN:MAX, docs/distributed.md "Elastic jobs"): once MIN nodes joined, the
  // job starts last_call later (or at once with MAX); a node that arrives while it runs is
  // admitted once no other node arrived for last_call and admit_backoff has passed since the
  // attempt started (the back-off doubles with every change of membership, up to 60 s).
  double last_call_s = 2;
  double admit_backoff_s = 5;
  std::string local_addr;       // --local-addr: this node's address for the others ("" = as seen)
  std::optional<bool> is_host;  // torchrun's is_host: force (1) or forbid (0) hosting; unset = by address
};

struct RunConfig {
  int nproc_per_node = 1;
  int nnodes = 1;      // --nnodes N; elastic --nnodes MIN:MAX: MIN (after the rendezvous: this attempt's count)
  int nnodes_max = 0;  // elastic: MAX; 0 = a fixed node count
  int nnodes_min = 0;  // elastic: MIN, kept when nnodes becomes an attempt's count (TRAINBOX_ELASTIC_NNODES)
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;  // 0 with --standalone until launch() picks a free one
  bool standalone = false;
  int max_restarts = 0;
  std::string log_dir;         // "" → launch() puts error files in a temporary folder
  bool log_dir_given = false;  // true: per-rank stdout.log/stderr.log are written too
  StdStreams redirects, tee;
  std::vector<int> local_ranks_filter;  // empty: every local rank reaches the console
  std::string run_id = "none";
  std::string role = "default";  // --role: the workers' ROLE_NAME (torchrun's default)
  double grace_period_s = 30;    // SIGTERM → SIGKILL; Slurm's default KillWait is also 30 s
  // Hangs (launch/stall.h): a worker that reports heartbeats and makes no progress for
  // stall_timeout_s is stalled (0 = never); on_stall: dump (stacks, keep running), kill
  // (stacks, stop the job, exit 124) or restart (stacks, restart under --max-restarts).
  // 180 s: well under the 300 s collective timeout trainbox train uses by default, so the
  // stuck rank is named before every other rank's collective fails anonymously.
  double stall_timeout_s = 180;
  StallAction on_stall = StallAction::kKill;
  double stack_timeout_s = 10;  // each stack tool, per rank (a hung tool is abandoned)
  bool prefix = true;           // "[rank N] " before every console line
  std::vector<std::string> command;
  std::string scheduler;                // "", "slurm" or "kubeflow": where defaults came from
  std::string rdzv_backend = "static";  // "static" (--node-rank given) or "c10d" (rdzv below)
  RdzvConfig rdzv;
  double monitor_interval_s = 0.1;  // accepted for torchrun; the launcher is event-driven
  std::vector<std::string> notes;   // one-line notes the launcher prints first ("--node-rank ignored")
  // Filled in by the c10d rendezvous, which allows nodes with different nproc_per_node:
  int rank_offset = -1;      // global rank of this node's local rank 0; -1 = static layout
  int total_world_size = 0;  // 0 = nnodes * nproc_per_node
  // Python workers' zero-code heartbeats (docs/python.md): the folder of trainbox's
  // sitecustomize.py, put first on a Python worker's PYTHONPATH; "" = off (--no-instrument,
  // or trainbox's Python files are not installed beside it).
  std::string python_boot;
  // --dashboard (dashboard/dashboard.h): port -1 = none. run_dir: where rank 0's metrics.jsonl is.
  dashboard::DashboardConfig dashboard;

  bool c10d() const { return rdzv_backend == "c10d"; }
  bool elastic() const { return nnodes_max > 0; }
  // What every node of a job must agree on beyond the CLI's counts, and what each may set its own
  // way: the digest of the worker command (launch/job_digest.h), compared at the join.
  std::string job_digest;
  int world_size() const { return total_world_size > 0 ? total_world_size : nnodes * nproc_per_node; }
  // Static, homogeneous nodes: lower nodes hold nproc_per_node ranks each.
  int global_rank(int local_rank) const {
    return (rank_offset >= 0 ? rank_offset : node_rank * nproc_per_node) + local_rank;
  }
};

// The interpreter for a .py script or -m MODULE, in this order:
//   1. $TRAINBOX_PYTHON, if set;
//   2. for a script that imports torch (an `import torch` / `from torch` line): the Python
//      whose torch this trainbox was built against (`build_python`, when it still exists),
//      with a note naming it when it is not the python3 on PATH;
//   3. the first python3 on $PATH (for a script that imports torch, checked to find it, with
//      a note naming TRAINBOX_PYTHON when it cannot);
//   4. python3 in `self_dir` (trainbox installed into a venv's bin/).
// Throws UsageError naming them when there is none. docs/distributed.md, "Python scripts".
struct PythonChoice {
  std::string script;                         // the .py file ("" for -m MODULE)
  std::string build_python;                   // "" = unknown; kBuildPython in trainbox run
  std::vector<std::string>* notes = nullptr;  // where the notes go (RunConfig::notes)
};
// The Python the build's torch came from (CMake: TRAINBOX_PYTHON, else the torch wheel's venv); "" when unknown.
extern const char* const kBuildPython;
std::string resolve_python(const EnvLookup& env, const std::string& self_dir, const PythonChoice& choice = {});
// Does this Python source import torch (a line `import torch…` or `from torch… import`)?
bool imports_torch(const std::string& source);

// --nproc-per-node: a count ≥ 1, "gpu" (visible NVIDIA GPUs), "cpu" (hardware threads this
// process may use) or "auto" (gpu count if > 0, else cpu count — torchrun's rule).
int resolve_nproc(const std::string& spec);
int resolve_nproc(const std::string& spec, int gpu_count, int cpu_count);
// GPUs a worker would see: /dev/nvidia<N> nodes (NVML's count if there are none), limited by
// CUDA_VISIBLE_DEVICES (util/job_env.h: visible_device_count). Never loads CUDA.
int visible_gpu_count();

RunConfig resolve_run_config(const RunArgs& args, const EnvLookup& env = process_env());

// --- the options, one declaration each (llama.cpp's common_arg) ---
// A row of run_options(): what the CLI, the help, the docs and resolve_run_config know about one
// option. resolve_run_config resolves the rows in table order (the order of --help and of the
// docs), each from the first source with a value: the CLI slot, then each variable of `env`, then
// the scheduler's fallback; `apply` parses that value (util/parse.h: errors name it, "--nnodes 0"
// or "PET_NNODES=0") into the RunConfig; `absent` runs when no source has one. A handler may read
// what the rows above it resolved (--node-rank reads nnodes), so the order is part of the table.
// A row without `apply` is read by another's handler through RunResolution::given (the dashboard's
// token and run dir by --dashboard; -m, --no-python and --no-instrument by the command stage).
// Adding an option: a row with its handler, and the RunConfig field it sets (the CLI's text
// lands in RunArgs::given under the row's flag).
struct RunResolution;  // src/launch/run_config.cpp: the config being resolved, the environment, the scheduler
struct RunOption {
  std::string_view names = {};       // CLI11's spelling: "-n,--nproc-per-node,--nproc_per_node"
  bool toggle = false;               // a switch (no value): given means on
  std::string_view value_hint = {};  // what a value looks like: "N|gpu|cpu|auto"
  std::string_view env = {};         // variables tried in order, comma-separated
  std::string_view scheduler = {};   // where Slurm/Kubeflow supply it, for the docs
  std::optional<Given> (*from_scheduler)(RunResolution&) = nullptr;
  std::string (*default_of)(const RunConfig&) = nullptr;  // shown from RunConfig{}; nullptr: none (help says)
  std::string_view help = {};                             // what it does; no default, no env (added from above)
  void (*apply)(const Given&, RunResolution&) = nullptr;
  void (*absent)(RunResolution&) = nullptr;

  std::string_view flag() const;     // the first long name: "--nproc-per-node" (errors and docs use it)
  std::string default_text() const;  // from RunConfig{}; "off" for a switch; "" for none
  std::string help_text() const;     // help + " (default D; env PET_X; else Slurm …)": --help's line
};
const std::vector<RunOption>& run_options();
// docs/distributed.md's option table (Markdown), as `trainbox run --help-markdown` prints it.
std::string run_options_markdown();

// <log_dir>/attempt_<restart_count>/<global rank>: a worker's error.json, result.json and logs. Global rank,
// not torchrun's local rank, so nodes sharing a log folder (NFS) never write the same file.
std::string worker_dir(const RunConfig& cfg, int local_rank, int restart_count);
// <log_dir>/attempt_<restart_count>/nccl_trace_rank_: the NCCL flight recorder's dump prefix
// (torch appends the rank).
std::string flight_recorder_prefix(const RunConfig& cfg, int restart_count);

// torchrun's worker variables, in torchrun's order (torch 2.11's set, including
// TORCHELASTIC_SIGNALS_TO_HANDLE; tests/integration/launcher.sh compares with real torchrun),
// then TRAINBOX_RESULT_FILE=<worker_dir>/result.json (util/result_file.h; always set, replacing
// an inherited value), and in an elastic job TRAINBOX_ELASTIC_NNODES=MIN:MAX (util/job_env.h:
// trainbox train keeps the global batch by it). TORCH_NCCL_ASYNC_ERROR_HANDLING keeps an existing value;
// OMP_NUM_THREADS=1 is added when unset and nproc_per_node > 1. Values equal torchrun's except
// TORCHELASTIC_USE_AGENT_STORE (False: rank 0 hosts the store) and the error file's folder.
std::vector<std::pair<std::string, std::string>> worker_env(const RunConfig& cfg, int local_rank, int restart_count,
                                                            const EnvLookup& env = process_env());
// --- Python workers' instrumentation (src/launch/python_instrument.cpp) ---
// Whether the command runs a Python interpreter (first word python, python3, python3.11 …;
// a .py script or -m MODULE has become one by then).
bool is_python_command(const std::vector<std::string>& command);
// trainbox/_boot beside the program (<prefix>/share/trainbox/python, a venv's
// lib/python*/site-packages), else in the checkout it was built from; "" if none.
std::string find_python_boot(const std::string& self_dir);
// For a Python command with cfg.python_boot set: PYTHONPATH=<boot>[:old] and TRAINBOX_INSTRUMENT=1.
void add_python_instrumentation(const RunConfig& cfg, const EnvLookup& env,
                                std::vector<std::pair<std::string, std::string>>& out);

// Whether worker_env adds OMP_NUM_THREADS (the launcher prints a one-line note once).
bool sets_omp_num_threads(const RunConfig& cfg, const EnvLookup& env = process_env());

}  // namespace trainbox::launch
