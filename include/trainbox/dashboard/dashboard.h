// trainbox/dashboard/dashboard.h — `trainbox run --dashboard [ADDR:]PORT`: the job, live, over HTTP;
// and `trainbox dash RUN_DIR…`: finished or running runs compared, on the same server and page.
//
// The launcher publishes what it knows (every rank's progress from the heartbeat files and, with
// c10d, the other nodes' ranks relayed over the control channel; attempts; the root cause) into a
// Dashboard; the Dashboard serves it read-only (docs/dashboard.md):
//   /            a self-contained page (HTML/JS/CSS built in; fetches /api/state every second)
//   /api/state   the state as JSON        /metrics   the Prometheus text format (0.0.4)
//   /api/log?rank=N   the tail of a local rank's --log-dir logs
// Threads: publish() is called from the launcher's loop and only copies the input under a short
// mutex. A collector thread (once a second) adds what costs time (NVML, metrics.jsonl, rates) and
// renders the JSON and the metrics text once; the HTTP threads (one per connection, at most
// kMaxConnections, read/write timeouts) only copy a shared_ptr to those texts. No worker and no
// lock of the launcher's is ever touched by a request, so a slow client cannot stall the job.
// Security: loopback by default; any other address needs a token (resolve_dashboard throws
// UsageError without one); GET/HEAD only; no environment variable is ever shown, and command
// arguments and log lines that look like secrets (env/probe's names) are redacted.
//
//   DashboardConfig c = resolve_dashboard("127.0.0.1:8265", "", "");  // UsageError on a bad spec
//   auto d = Dashboard::start(c, job);      // binds now (UsageError when the port is taken)
//   d->publish(input);                      // from the launcher's loop, every ~0.5 s
//   auto r = Dashboard::serve_runs(c, expand_run_dirs({"runs/a", "runs/b"}));  // trainbox dash
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::dashboard {

inline constexpr const char* kDashboardTokenEnv = "TRAINBOX_DASHBOARD_TOKEN";

struct DashboardConfig {
  std::string addr = "127.0.0.1";
  int port = -1;        // -1: no dashboard; 0: any free port (printed)
  std::string token;    // "" on loopback: no token asked
  std::string run_dir;  // --dashboard-run-dir: where rank 0's metrics.jsonl is ("" = found, docs/dashboard.md)
  bool enabled() const { return port >= 0; }
};

// Which command serves the dashboard: its messages name that command's options (trainbox run's
// --dashboard / --dashboard-token, trainbox dash's --addr / --port / --token).
enum class DashboardServer { kRun, kDash };
// "[ADDR:]PORT" ("8265", "127.0.0.1:8265", "0.0.0.0:8265", "[::1]:8265"); token: --dashboard-token,
// else env_token ($TRAINBOX_DASHBOARD_TOKEN). Throws UsageError for a bad spec, or for a
// non-loopback address without a token.
DashboardConfig resolve_dashboard(const std::string& spec, const std::string& token, const std::string& env_token,
                                  DashboardServer server = DashboardServer::kRun);
// Constant-time comparison of a presented token with the expected one; true when none is expected.
bool token_matches(std::string_view expected, std::string_view given);

// --- the state, as served ---
struct DashRank {
  int rank = 0, local_rank = 0, node_rank = 0;
  std::string host;
  long long pid = 0;
  bool reporting = false, finished = false, stalled = false, culprit = false;
  std::int64_t step = 0;
  std::string phase;
  char state = '?';             // the kernel's (R S D T Z), when sampled
  double heartbeat_age_s = -1;  // since its heartbeat record last changed; -1: none yet
  double steps_per_s = -1;      // over the last ~10 s; -1 unknown
  double samples_per_s = -1;    // steps/s × samples per step and rank (metrics.jsonl); -1 unknown
  // The last metrics.jsonl window's communication figures (train/types.h CommFigures); -1 unknown.
  double comm_sent_bytes_per_step = -1, comm_wait_s_per_step = -1, compression_ratio = -1;
};
struct DashGpu {
  std::string host, name, uuid;
  int index = 0;
  int util_pct = -1, mem_util_pct = -1, temperature_c = -1;
  std::int64_t mem_used_bytes = -1, mem_total_bytes = -1;
  double power_w = -1;
};
struct DashSeries {
  std::string name;                               // "train/loss", "train/lr", "eval/accuracy" …
  std::vector<std::pair<double, double>> points;  // (step, value), at most kMaxCurvePoints
};
struct DashJob {
  std::string command;                            // secrets redacted (redact_command)
  std::string run_id, host, status = "starting";  // starting running stalled stopping restarting succeeded failed
  int nnodes = 1, world_size = 1, node_rank = 0;
  int attempt = 0, max_restarts = 0;
  double stall_timeout_s = 0, uptime_s = 0;
  std::string stall_headline;  // the console's "stalled: …" headline, while a rank is stalled
  std::string root_cause;      // the failure that ended (or restarted) the job, one line
  int exit_code = -1;          // once the job has ended
  int root_cause_rank = -1;    // the rank the root cause names (-1: none, or a node)
  std::string run_dir;         // rank 0's run dir, whose metrics.jsonl is read ("" none found yet)
  std::string metrics_path;    // that metrics.jsonl
  std::string compression;     // its dist.grad_compression, from the communication figures ("" none yet)
  double samples_per_s = -1;   // the job's: the sum of the ranks' samples/s (-1 unknown)
  int log_rank = -1;           // the rank whose log the page opens on: the culprit, else the failed
                               // rank, else the first with a non-empty log, else the first (-1: none)
};
struct DashboardState {
  DashJob job;
  std::vector<DashRank> ranks;  // by rank
  bool gpus_known = false;      // NVML answered (then an empty list means no GPU)
  std::string gpu_note;         // why there are no GPU figures
  std::vector<DashGpu> gpus;
  std::vector<DashSeries> curves;
  // A mixture of experts' routing over the last metrics.jsonl window (its "moe"; docs/moe.md): the
  // tokens each expert of each layer received, summed over the ranks, and each layer's max / mean.
  std::vector<std::vector<double>> moe_tokens;
  std::vector<double> moe_imbalance;
};
inline constexpr std::size_t kMaxCurvePoints = 400;

// A Prometheus label value: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view v);
// The exposition text (trainbox_* per rank, DCGM_FI_DEV_* per GPU; docs/dashboard.md).
std::string render_prometheus(const DashboardState& s);
std::string render_state_json(const DashboardState& s);
// The command for display: the value after an option, and NAME=value, redacted when the name
// looks like a secret (TOKEN, KEY, PASSWORD, SECRET, CREDENTIAL — the doctor's list).
std::string redact_command(const std::vector<std::string>& argv);
std::string redact_line(std::string line);
// Where rank 0's metrics.jsonl is: --dashboard-run-dir; else the command's --run-dir DIR /
// --resume DIR; "" when neither (then the collector looks for the newest ./runs/*/metrics.jsonl
// written since the job started).
std::string run_dir_of(const std::vector<std::string>& argv, const std::string& given);

// --- trainbox dash: run dirs side by side (docs/dashboard.md, "trainbox dash") ---
// One run dir of `trainbox train`: its metrics.jsonl as curves, its config.toml flattened.
// A run's gradient exchange as rank 0 measured it (metrics.jsonl's "comm": the summary line's
// whole run once it is written, the last train line's window before; docs/distributed.md).
struct DashRunComm {
  std::string compression;         // dist.grad_compression
  double sent_bytes_per_step = 0;  // what rank 0 sent per optimizer step
  double fp32_bytes_per_step = 0;  // what an fp32 DDP all-reduce of the same model sends
  double compression_ratio = 0;    // fp32 / sent (under 1: more than fp32 DDP, ZeRO's all-gathers)
  double wait_s_per_step = 0;      // seconds per step blocked waiting on a collective
  bool whole_run = false;          // from the summary line (else the last window's)
};
struct DashRun {
  std::string name;    // the folder's name; parent/name where two runs share a name
  std::string dir;     // absolute
  std::string status;  // finished (a summary line), running (written in the last 60 s), stopped, empty
  double last_step = 0;
  std::vector<DashSeries> curves;
  std::map<std::string, std::string> config;  // "optim.lr" -> "0.1" (TOML text of the value)
  std::optional<DashRunComm> comm;            // runs with a process group only
};
// A config key whose value is not the same in every run; nullopt where a run lacks the key.
struct ConfigDiffRow {
  std::string key;
  std::vector<std::optional<std::string>> values;  // one per run, in the runs' order
};
struct RunsState {
  std::vector<DashRun> runs;
  std::vector<ConfigDiffRow> config_diff;
  std::size_t config_keys = 0;  // keys compared (the union)
  double uptime_s = 0;
};
// At most this many runs are served (colours repeat after 10; the page stays readable to ~20).
inline constexpr std::size_t kMaxRuns = 64;
// config.toml as dotted keys ("optim.lr") and the TOML text of each value; {} for text that is
// not TOML (a run dir whose config is being written).
std::map<std::string, std::string> flatten_config_toml(std::string_view text);
// The keys whose values differ between the runs (or that some run lacks), sorted by key.
std::vector<ConfigDiffRow> config_diff(const std::vector<DashRun>& runs);
// {"mode":"runs","runs":[…curves…],"config_diff":[{"key","values"}],…} for the page.
std::string render_runs_json(const RunsState& s);
// The run dirs named on the command line, absolute: a folder with metrics.jsonl or config.toml
// is a run; a folder without either whose subfolders have them (runs/) stands for those, newest
// last. UsageError naming the folder that is neither, or when there are over kMaxRuns.
std::vector<std::string> expand_run_dirs(const std::vector<std::string>& args);
// Display names: the folder name, or parent/name where folder names repeat.
std::vector<std::string> run_names(const std::vector<std::string>& dirs);

// What the launcher publishes (cheap to build: it has these at hand).
struct DashboardInput {
  DashJob job;
  // This node's and the others' (c10d) ranks, ages as of now: rank, local_rank, node_rank, host,
  // pid, reporting, finished, step, phase, state, heartbeat_age_s. The collector sets stalled,
  // culprit and the rates (the launcher's stall types stay in launch/: this folder sits below it).
  std::vector<DashRank> ranks;
  std::vector<int> stalled, culprits;
  std::vector<std::pair<int, std::string>> log_dirs;  // local rank's global rank → its worker dir (--log-dir)
};

class Dashboard {
 public:
  // At most this many connections are served at once (one thread each); more wait in the
  // kernel's backlog. Each is closed after 2 s without a request (read timeout and keep-alive).
  static constexpr int kMaxConnections = 256;
  // Binds (UsageError naming the address when it cannot) and starts the threads.
  static std::unique_ptr<Dashboard> start(const DashboardConfig& cfg, const std::string& launcher_cwd);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;
  // trainbox dash: the same server, page and rules, serving run dirs (expand_run_dirs) instead of
  // a job: /api/state is render_runs_json, refreshed every second; /metrics answers 404.
  static std::unique_ptr<Dashboard> serve_runs(const DashboardConfig& cfg, std::vector<std::string> run_dirs);
  void publish(DashboardInput in);
  int port() const;
  std::string url() const;  // with ?token=… when a token is set

  struct Impl;

 private:
  explicit Dashboard(std::unique_ptr<Impl> impl);
  static std::unique_ptr<Dashboard> start_impl(std::unique_ptr<Impl> impl);  // binds, starts the threads
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainbox::dashboard
