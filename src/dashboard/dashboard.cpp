// `trainbox run --dashboard`: the HTTP server (cpp-httplib) and the collector thread.
// dashboard/dashboard.h has the threading contract; docs/dashboard.md the endpoints.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <trainbox/env/nvml.h>
#include <trainbox/dashboard/dashboard.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/clock.h>

#include "dashboard_page.h"

namespace trainbox::dashboard {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// 2 s: a browser polling once a second keeps its connection; an idle or trickling client
// frees its thread within 2 s of silence.
constexpr int kIoTimeoutS = 2;
// The page's requests are a few hundred bytes; nothing here takes a body.
constexpr std::size_t kMaxBody = 4096;
// The rate window (training seconds): long enough to smooth a step's jitter, short enough to show a slowdown.
constexpr double kRateWindowS = 10;
// Bytes of metrics.jsonl read per collector tick (a long run's file is caught up over ticks).
constexpr std::size_t kMetricsChunk = 4 << 20;
constexpr std::size_t kLogTailBytes = 16 << 10;
// The JSON answers go out uncompressed. cpp-httplib compresses exactly "application/json"
// (and text/*) for a client that accepts it, and Debian's build has brotli at quality 11: a
// browser's Accept-Encoding made each 65 KiB /api/state of a 256-rank job cost ~150 ms of
// brotli, 89 % of the launcher's CPU with the page open (perf; bench/dashboard.sh). With the
// charset parameter it is not on httplib's list. The page (once per load) and /metrics (a
// scrape every 15 s or so) keep httplib's compression.
constexpr const char* kJson = "application/json; charset=utf-8";
// Every plain-text answer says its charset: without one a browser guesses (and showed "â€¦").
constexpr const char* kText = "text/plain; charset=utf-8";

// Before the collector's first render (the first moments of a job): 503, and a poll a second later.
void not_yet(httplib::Response& res) {
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content("trainbox run is collecting the job's first state: ask again in a second\n", kText);
}

// Live connections, shared by the task queue, its detached threads and the Dashboard (each
// may outlive the others).
struct ConnectionCount {
  std::mutex mu;
  std::condition_variable cv;
  int live = 0;
  int now() {
    std::lock_guard g(mu);
    return live;
  }
};

// One thread per connection, at most `max` at once: a connection that sends nothing holds
// only its own thread (until the read timeout), never the page. Beyond `max`, accept waits.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  ConnectionThreads(std::shared_ptr<ConnectionCount> count, int max) : s_(std::move(count)), max_(max) {}
  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock l(s_->mu);
      s_->cv.wait(l, [&] { return s_->live < max_; });
      ++s_->live;
    }
    auto done = [s = s_] {
      std::lock_guard g(s->mu);
      --s->live;
      s->cv.notify_all();
    };
    try {
      std::thread([fn, done] {
        fn();
        done();
      }).detach();
    } catch (const std::system_error&) {  // no thread to be had: serve it here (bounded by the timeouts)
      fn();
      done();
    }
  }
  // Waits for the live connections (each ends within the I/O timeout once the server stops).
  void shutdown() override {
    std::unique_lock l(s_->mu);
    s_->cv.wait_for(l, std::chrono::seconds(kIoTimeoutS + 1), [&] { return s_->live == 0; });
  }

 private:
  std::shared_ptr<ConnectionCount> s_;
  int max_;
};

// rank 0's metrics.jsonl, read incrementally into curves.
class MetricsReader {
 public:
  MetricsReader(std::string run_dir, std::string cwd, std::time_t since)
      : run_dir_(std::move(run_dir)), cwd_(std::move(cwd)), since_(since) {}
  void poll() {
    if (path_.empty() && !find()) return;
    std::ifstream f(path_, std::ios::binary);
    if (!f) return;
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    if (size < offset_) offset_ = 0, partial_.clear(), series_.clear();  // rewritten
    f.seekg(offset_);
    std::string chunk(static_cast<std::size_t>(std::min<std::streamoff>(size - offset_, kMetricsChunk)), '\0');
    f.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    offset_ += f.gcount();
    partial_ += chunk.substr(0, static_cast<std::size_t>(f.gcount()));
    std::size_t start = 0;
    for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
      line(std::string_view(partial_).substr(start, nl - start));
    partial_.erase(0, start);
  }
  std::vector<DashSeries> curves() const {
    std::vector<DashSeries> out;
    for (const auto& [name, pts] : series_) {
      DashSeries s{name, {}};
      const std::size_t stride = pts.size() / kMaxCurvePoints + 1;
      for (std::size_t i = 0; i < pts.size(); i += stride) s.points.push_back(pts[i]);
      if (!pts.empty() && s.points.back() != pts.back()) s.points.push_back(pts.back());
      out.push_back(std::move(s));
    }
    return out;
  }
  const std::string& path() const { return path_; }
  std::string dir() const { return path_.empty() ? "" : fs::path(path_).parent_path().string(); }
  double samples_per_rank_step() const { return samples_per_rank_step_; }
  bool finished() const { return finished_; }  // trainbox train's closing "summary" line seen
  const nlohmann::json& comm() const { return comm_; }
  const nlohmann::json& moe() const {
    return moe_;
  }  // the last train line's "moe" (null: none)  // the last train line's "comm" (null: none)
  double last_step() const { return last_step_; }
  // The run's exchange, rank 0's: the summary's whole run, else the last window (nullopt: no "comm").
  std::optional<DashRunComm> run_comm() const {
    const nlohmann::json& c = run_comm_.is_object() ? run_comm_ : comm_;
    if (!c.is_object()) return std::nullopt;
    auto first = [&](const char* key) {
      const auto it = c.find(key);
      return it != c.end() && it->is_array() && !it->empty() && (*it)[0].is_number() ? (*it)[0].get<double>() : 0.0;
    };
    DashRunComm r;
    const auto m = c.find("compression");
    r.compression = m != c.end() && m->is_string() ? m->get<std::string>() : "";
    r.sent_bytes_per_step = first("sent_bytes_per_step");
    r.fp32_bytes_per_step = number(c, "fp32_bytes_per_step");
    r.compression_ratio = first("compression_ratio");
    r.wait_s_per_step = first("wait_s_per_step");
    r.whole_run = run_comm_.is_object();
    return r;
  }

 private:
  bool find() {
    auto abs = [&](const std::string& p) { return fs::path(p).is_absolute() ? p : cwd_ + "/" + p; };
    std::error_code ec;
    if (!run_dir_.empty()) {
      if (fs::exists(abs(run_dir_) + "/metrics.jsonl", ec)) path_ = abs(run_dir_) + "/metrics.jsonl";
      return !path_.empty();
    }
    // trainbox train's default run dir: runs/<model>-<time>, in the workers' (= our) cwd
    if (Clock::now() < next_scan_) return false;
    next_scan_ = Clock::now() + std::chrono::seconds(2);
    std::time_t newest = since_ - 5;
    for (const auto& e : fs::directory_iterator(cwd_ + "/runs", ec)) {
      struct stat st {};
      const std::string m = e.path().string() + "/metrics.jsonl";
      if (::stat(m.c_str(), &st) == 0 && st.st_mtime >= newest) newest = st.st_mtime, path_ = m;
    }
    return !path_.empty();
  }
  // A number field, 0 when absent or not a number (a line is never trusted to be well formed).
  static double number(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
  }
  void line(std::string_view text) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.value("event", nlohmann::json()) == "summary") {  // (it has no step)
      finished_ = true;
      if (const auto c = j.find("comm"); c != j.end() && c->is_object()) run_comm_ = *c;
    }
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number() || !j.contains("event")) return;
    const std::string event = j["event"].is_string() ? j["event"].get<std::string>() : "";
    if (event != "train" && event != "eval" && event != "test") return;
    const double step = j["step"].get<double>();
    last_step_ = std::max(last_step_, step);
    for (const auto& [k, v] : j.items()) {
      if (!v.is_number() || k == "step" || k == "epoch" || k == "samples" || k == "global_batch" || k == "world_size")
        continue;
      auto& pts = series_[event + "/" + k];
      pts.emplace_back(step, v.get<double>());
      if (pts.size() > 20000) {  // keep memory bounded on long runs: every other point
        std::vector<std::pair<double, double>> half;
        for (std::size_t i = 0; i < pts.size(); i += 2) half.push_back(pts[i]);
        pts.swap(half);
      }
    }
    if (event != "train") return;
    if (const auto c = j.find("comm"); c != j.end() && c->is_object()) comm_ = *c;
    if (const auto m = j.find("moe"); m != j.end() && m->is_object()) moe_ = *m;
    // Every rank trains global_batch / world_size samples a step (docs/trainer.md, metrics.jsonl).
    // Lines written before those two fields were kept counted `samples` for rank 0 alone, since step 0.
    const double global = number(j, "global_batch"), world = number(j, "world_size");
    if (global > 0 && world > 0)
      samples_per_rank_step_ = global / world;
    else if (number(j, "samples") > 0 && step > 0)
      samples_per_rank_step_ = number(j, "samples") / step;
  }
  std::string run_dir_, cwd_, path_;
  std::time_t since_;
  Clock::time_point next_scan_{};
  std::streamoff offset_ = 0;
  std::string partial_;
  std::map<std::string, std::vector<std::pair<double, double>>> series_;
  nlohmann::json comm_, run_comm_;    // the last train line's "comm"; the summary line's
  nlohmann::json moe_;                // the last train line's "moe" (a mixture of experts' routing)
  double samples_per_rank_step_ = 0;  // samples one rank trains per optimizer step
  bool finished_ = false;
  double last_step_ = 0;
};

std::time_t mtime_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mtime : -1;
}

std::string read_small_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string text;
  char buf[4096];
  // config.toml is ~5 KiB; 1 MiB bounds what a stray file can cost a tick.
  while (f && text.size() < (1u << 20)) {
    f.read(buf, sizeof buf);
    text.append(buf, static_cast<std::size_t>(f.gcount()));
  }
  return text;
}

// One run dir of trainbox dash: its curves read incrementally, its config re-read when it changes.
struct RunWatch {
  std::string name, dir;
  MetricsReader metrics;
  std::time_t config_mtime = -1;
  std::map<std::string, std::string> config;
  RunWatch(std::string n, const std::string& d) : name(std::move(n)), dir(d), metrics(d, "/", 0) {}
  DashRun poll() {
    metrics.poll();
    const std::string cfg = dir + "/config.toml";
    if (const std::time_t m = mtime_of(cfg); m != config_mtime) {
      config = flatten_config_toml(read_small_file(cfg));
      config_mtime = m;
    }
    DashRun r{name, dir, "empty", metrics.last_step(), metrics.curves(), config, metrics.run_comm()};
    // 60 s: trainbox train appends a line every log_every steps; a minute of silence without
    // its closing summary line means it was stopped (or is evaluating a very large set).
    if (metrics.finished())
      r.status = "finished";
    else if (!metrics.path().empty())
      r.status = std::time(nullptr) - mtime_of(metrics.path()) < 60 ? "running" : "stopped";
    return r;
  }
};

std::vector<std::string> tail_lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream f(path, std::ios::binary);
  if (!f) return out;
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - static_cast<std::streamoff>(kLogTailBytes));
  f.seekg(from);
  std::string text(static_cast<std::size_t>(size - from), '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(f.gcount()));
  auto lines = split(text, '\n');
  if (from > 0 && !lines.empty()) lines.erase(lines.begin());  // a partial first line
  for (auto& l : lines) out.push_back(redact_line(std::move(l)));
  return out;
}

}  // namespace

struct Dashboard::Impl {
  DashboardConfig cfg;
  std::string cwd;
  Clock::time_point started = Clock::now();
  httplib::Server server;
  std::shared_ptr<ConnectionCount> connections = std::make_shared<ConnectionCount>();
  std::thread listener, collector;
  std::atomic<bool> listener_done{false};  // listen_after_bind returned (or never listened)
  int port = 0;

  // --- published by the launcher (short critical sections only) ---
  std::mutex in_mu;
  std::optional<DashboardInput> input;

  // --- rendered by the collector, read by the HTTP threads ---
  std::mutex out_mu;
  // Null until the collector's first render: until then both answer 503 (a poll that comes
  // in the first moments of a job must not read a state without ranks as the job's).
  std::shared_ptr<const std::string> state_json;
  std::shared_ptr<const std::string> metrics_text;
  std::shared_ptr<const std::vector<std::pair<int, std::string>>> log_dirs =
      std::make_shared<std::vector<std::pair<int, std::string>>>();

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;

  // --- the collector's own ---
  // A rank's rate is over its training time, as trainbox train's console rate is: from its first
  // step (not the start-up before it), leaving out the ticks it spent evaluating or checkpointing.
  struct RateClock {
    Clock::time_point last{};
    double train_s = 0;                                 // training seconds since its first step in this attempt
    bool moved = false;                                 // a step seen
    std::deque<std::pair<double, std::int64_t>> steps;  // (train_s, step)
  };
  std::map<int, RateClock> history;  // by rank
  int history_attempt = -1;
  std::vector<std::string> run_dirs;  // trainbox dash: the runs served instead of a job

  void collect_loop();
  void runs_loop();
  void set_output(std::string json, std::string prom);
  DashboardState collect(env::Nvml& nvml, bool& nvml_tried, MetricsReader& metrics);
  void rates(DashRank& r, Clock::time_point now, double samples_per_rank_step);
  static int default_log_rank(const DashboardInput& in);
  void routes();
};

void Dashboard::Impl::rates(DashRank& r, Clock::time_point now, double samples_per_rank_step) {
  RateClock& c = history[r.rank];
  if (!c.steps.empty() && r.step < c.steps.back().second) c = RateClock{};  // a new run in the same rank
  const double dt = c.steps.empty() ? 0.0 : to_seconds(now - c.last);
  const std::int64_t before = c.steps.empty() ? r.step : c.steps.back().second;
  c.last = now;
  if (!c.moved) {  // start-up: the clock starts at its first step
    c.moved = !c.steps.empty() && r.step != before;
    c.steps = {{0.0, r.step}};
    return;
  }
  // A tick without a step spent in evaluation or a checkpoint is not training time; one with steps is.
  if (r.step != before || (r.phase != "eval" && r.phase != "checkpoint")) c.train_s += dt;
  c.steps.emplace_back(c.train_s, r.step);
  while (c.steps.size() > 2 && c.train_s - c.steps[1].first >= kRateWindowS) c.steps.pop_front();
  const double span = c.steps.back().first - c.steps.front().first;
  if (span < 1.0 || r.finished) return;
  r.steps_per_s = static_cast<double>(c.steps.back().second - c.steps.front().second) / span;
  if (samples_per_rank_step > 0) r.samples_per_s = r.steps_per_s * samples_per_rank_step;
}

// The log that explains the job's state: the stall's culprit, else the rank the root cause
// names, else the first rank whose log has anything in it (rank 0's is often empty), else the first.
int Dashboard::Impl::default_log_rank(const DashboardInput& in) {
  if (!in.culprits.empty()) return in.culprits.front();
  if (in.job.root_cause_rank >= 0) return in.job.root_cause_rank;
  auto dirs = in.log_dirs;
  std::sort(dirs.begin(), dirs.end());
  for (const auto& [rank, dir] : dirs) {
    struct stat out {
    }, err{};
    if ((::stat((dir + "/stdout.log").c_str(), &out) == 0 && out.st_size > 0) ||
        (::stat((dir + "/stderr.log").c_str(), &err) == 0 && err.st_size > 0))
      return rank;
  }
  if (!dirs.empty()) return dirs.front().first;
  int first = -1;
  for (const auto& r : in.ranks)
    if (first < 0 || r.rank < first) first = r.rank;
  return first;
}

namespace {
// The last window's communication figures onto the ranks they name (arrays indexed by rank;
// a line is never trusted to be well formed: anything else is left unknown).
void add_comm(DashboardState& s, const nlohmann::json& c) {
  if (!c.is_object()) return;
  s.job.compression = c.value("compression", nlohmann::json()).is_string() ? c["compression"].get<std::string>() : "";
  auto at = [&](const char* key, int rank) {
    const auto it = c.find(key);
    if (it == c.end() || !it->is_array() || rank < 0 || rank >= int(it->size()) || !(*it)[rank].is_number())
      return -1.0;
    return (*it)[rank].get<double>();
  };
  for (auto& r : s.ranks) {
    r.comm_sent_bytes_per_step = at("sent_bytes_per_step", r.rank);
    r.comm_wait_s_per_step = at("wait_s_per_step", r.rank);
    r.compression_ratio = at("compression_ratio", r.rank);
  }
}

// The last window's experts' load (metrics.jsonl's "moe"): numbers only, anything else skipped.
void add_moe(DashboardState& s, const nlohmann::json& m) {
  if (!m.is_object()) return;
  if (const auto t = m.find("tokens"); t != m.end() && t->is_array())
    for (const auto& layer : *t) {
      std::vector<double> row;
      if (layer.is_array())
        for (const auto& v : layer)
          if (v.is_number()) row.push_back(v.get<double>());
      s.moe_tokens.push_back(std::move(row));
    }
  if (const auto i = m.find("imbalance"); i != m.end() && i->is_array())
    for (const auto& v : *i) s.moe_imbalance.push_back(v.is_number() ? v.get<double>() : std::nan(""));
}
}  // namespace

DashboardState Dashboard::Impl::collect(env::Nvml& nvml, bool& nvml_tried, MetricsReader& metrics) {
  std::optional<DashboardInput> in;
  {
    std::lock_guard g(in_mu);
    in = input;
  }
  DashboardState s;
  const auto now = Clock::now();
  metrics.poll();
  if (in) {
    s.job = in->job;
    if (in->job.attempt != history_attempt) history.clear(), history_attempt = in->job.attempt;
    const double per_rank = metrics.samples_per_rank_step();
    for (DashRank r : in->ranks) {
      r.stalled = std::find(in->stalled.begin(), in->stalled.end(), r.rank) != in->stalled.end();
      r.culprit = std::find(in->culprits.begin(), in->culprits.end(), r.rank) != in->culprits.end();
      rates(r, now, per_rank);
      s.ranks.push_back(std::move(r));
    }
    std::sort(s.ranks.begin(), s.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    add_comm(s, metrics.comm());
    add_moe(s, metrics.moe());
    // The job's rate is the sum of its ranks' (what trainbox train's console line shows).
    for (const auto& r : s.ranks)
      if (r.samples_per_s >= 0) s.job.samples_per_s = std::max(0.0, s.job.samples_per_s) + r.samples_per_s;
    s.job.log_rank = default_log_rank(*in);
  }
  s.job.host = s.job.host.empty() ? host_name("?") : s.job.host;
  s.job.uptime_s = to_seconds(now - started);
  s.job.metrics_path = metrics.path();
  s.job.run_dir = metrics.dir();
  s.curves = metrics.curves();
  // --- GPUs: NVML, opened once in this thread (one Nvml per thread) ---
  if (!nvml_tried) {
    nvml = env::Nvml::open();
    nvml_tried = true;
  }
  if (nvml) {
    s.gpus_known = true;
    for (const auto& g : nvml.gpus(false))
      s.gpus.push_back({s.job.host, g.name, g.uuid, g.index, g.util_gpu_pct, g.util_mem_pct, g.temperature_c,
                        g.mem_used_bytes, g.mem_total_bytes, g.power_w});
  } else {
    s.gpu_note = "NVML unavailable: " + nvml.error();
  }
  if (s.gpus.empty() && s.gpu_note.empty()) s.gpu_note = "NVML sees none";
  return s;
}

void Dashboard::Impl::collect_loop() {
  env::Nvml nvml = env::Nvml::open({}, false);  // a closed one until the first tick opens the real one
  bool nvml_tried = false;
  MetricsReader metrics(cfg.run_dir, cwd, std::time(nullptr));
  for (;;) {
    DashboardState s = collect(nvml, nvml_tried, metrics);
    std::shared_ptr<const std::vector<std::pair<int, std::string>>> logs;
    {
      std::lock_guard g(in_mu);
      if (input) logs = std::make_shared<const std::vector<std::pair<int, std::string>>>(input->log_dirs);
    }
    set_output(render_state_json(s), render_prometheus(s));
    if (logs) {
      std::lock_guard g(out_mu);
      log_dirs = std::move(logs);
    }
    std::unique_lock l(stop_mu);
    // 500 ms: the page polls every second, so what it shows is at most 1.5 s old.
    if (stop_cv.wait_for(l, std::chrono::milliseconds(500), [&] { return stopping; })) return;
  }
}

void Dashboard::Impl::set_output(std::string json, std::string prom) {
  auto j = std::make_shared<const std::string>(std::move(json));
  auto p = std::make_shared<const std::string>(std::move(prom));
  std::lock_guard g(out_mu);
  state_json = std::move(j);
  metrics_text = std::move(p);
}

void Dashboard::Impl::runs_loop() {
  const std::vector<std::string> names = run_names(run_dirs);
  std::vector<RunWatch> watch;
  watch.reserve(run_dirs.size());
  for (std::size_t i = 0; i < run_dirs.size(); ++i) watch.emplace_back(names[i], run_dirs[i]);
  for (;;) {
    RunsState s;
    std::set<std::string> keys;
    for (auto& w : watch) {
      s.runs.push_back(w.poll());
      for (const auto& kv : s.runs.back().config) keys.insert(kv.first);
    }
    s.config_diff = config_diff(s.runs);
    s.config_keys = keys.size();
    s.uptime_s = seconds_since(started);
    set_output(render_runs_json(s), "");
    std::unique_lock l(stop_mu);
    // 1 s: finished runs do not change, and a running one appends a line every few steps.
    if (stop_cv.wait_for(l, std::chrono::seconds(1), [&] { return stopping; })) return;
  }
}

void Dashboard::Impl::routes() {
  server.set_read_timeout(kIoTimeoutS, 0);
  server.set_write_timeout(kIoTimeoutS, 0);
  server.set_keep_alive_timeout(kIoTimeoutS);
  server.set_keep_alive_max_count(1000);
  server.set_payload_max_length(kMaxBody);
  server.set_socket_options([](int sock) {
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    fcntl(sock, F_SETFD, FD_CLOEXEC);  // the workers never inherit the listening socket
  });
  server.new_task_queue = [this] { return new ConnectionThreads(connections, kMaxConnections); };
  // Read-only, and the token before anything else.
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    if (req.method != "GET" && req.method != "HEAD") {
      res.status = 405;
      res.set_header("Allow", "GET, HEAD");
      res.set_content("read-only: GET and HEAD only\n", kText);
      return httplib::Server::HandlerResponse::Handled;
    }
    std::string given = req.get_param_value("token");
    const std::string auth = req.get_header_value("Authorization");
    if (given.empty() && starts_with(auth, "Bearer ")) given = auth.substr(7);
    if (!token_matches(cfg.token, given)) {
      res.status = 403;
      res.set_content(fmt::format("a token is needed: open the URL {} printed (.../?token=...), or send "
                                  "Authorization: Bearer TOKEN\n",
                                  run_dirs.empty() ? "trainbox run --dashboard" : "trainbox dash"),
                      kText);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                   "img-src 'self' data:");
    res.set_content(kDashboardPage, "text/html; charset=utf-8");
  });
  server.Get("/api/state", [this](const httplib::Request&, httplib::Response& res) {
    std::shared_ptr<const std::string> s;
    {
      std::lock_guard g(out_mu);
      s = state_json;
    }
    if (!s) return not_yet(res);
    res.set_content(*s, kJson);
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (!run_dirs.empty()) {
      res.status = 404;
      res.set_content("trainbox dash serves no job: /metrics is trainbox run --dashboard's\n", kText);
      return;
    }
    std::shared_ptr<const std::string> s;
    {
      std::lock_guard g(out_mu);
      s = metrics_text;
    }
    if (!s) return not_yet(res);
    res.set_content(*s, "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/api/log", [this](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<const std::vector<std::pair<int, std::string>>> dirs;
    {
      std::lock_guard g(out_mu);
      dirs = log_dirs;
    }
    int rank = 0;
    try {  // util/parse.h: "rank=x: must be a whole number from 0 to …"
      rank = static_cast<int>(parse_int(Given{req.get_param_value("rank"), "rank"}, 0, INT_MAX));
    } catch (const ParseError& e) {
      res.status = 400;
      res.set_content(std::string(e.what()) + "\n", kText);
      return;
    }
    nlohmann::json out = {{"rank", rank}, {"stdout", nlohmann::json::array()}, {"stderr", nlohmann::json::array()}};
    const auto it = std::find_if(dirs->begin(), dirs->end(), [&](const auto& d) { return d.first == rank; });
    if (it == dirs->end())
      out["note"] = "no log here: pass --log-dir to trainbox run (another node's ranks log on their node)";
    else
      for (const char* stream : {"stdout", "stderr"}) out[stream] = tail_lines(it->second + "/" + stream + ".log");
    res.set_content(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJson);
  });
}

Dashboard::Dashboard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Dashboard> Dashboard::start(const DashboardConfig& cfg, const std::string& launcher_cwd) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->cwd = launcher_cwd;
  return start_impl(std::move(impl));
}

std::unique_ptr<Dashboard> Dashboard::serve_runs(const DashboardConfig& cfg, std::vector<std::string> run_dirs) {
  if (run_dirs.empty()) throw UsageError("trainbox dash: no run dir given", "trainbox dash runs/a runs/b");
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->run_dirs = std::move(run_dirs);
  return start_impl(std::move(impl));
}

std::unique_ptr<Dashboard> Dashboard::start_impl(std::unique_ptr<Impl> impl) {
  const DashboardConfig& cfg = impl->cfg;
  impl->routes();
  const std::string where = fmt::format("{}:{}", cfg.addr, cfg.port);
  impl->port = cfg.port == 0                                   ? impl->server.bind_to_any_port(cfg.addr)
               : impl->server.bind_to_port(cfg.addr, cfg.port) ? cfg.port
                                                               : -1;
  if (impl->port <= 0)
    throw UsageError(fmt::format("{} {}: cannot listen there (the port is taken, or the address is not "
                                 "this machine's)",
                                 impl->run_dirs.empty() ? "--dashboard" : "trainbox dash", where),
                     impl->run_dirs.empty() ? "pick another port (--dashboard 0 picks a free one) or address"
                                            : "pick another port (--port 0 picks a free one) or address");
  // The threads never take a signal: the launcher's signalfd must see every one.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  Impl* p = impl.get();
  p->listener = std::thread([p] {
    p->server.listen_after_bind();
    p->listener_done = true;
  });
  p->collector = std::thread([p] { p->run_dirs.empty() ? p->collect_loop() : p->runs_loop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return std::unique_ptr<Dashboard>(new Dashboard(std::move(impl)));
}

Dashboard::~Dashboard() {
  {
    std::lock_guard g(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  impl_->collector.join();
  // httplib's stop() does nothing until listen has begun (is_running), and listen then serves
  // forever: a job that ends at once (`trainbox run --dashboard 0 -- true` on a loaded machine)
  // would hang here. Wait for the listener to start (or to have given up) first.
  while (!impl_->server.is_running() && !impl_->listener_done)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->server.stop();
  impl_->listener.join();  // waits up to the I/O timeout + 1 s for live connections
  // A connection still live (a client trickling bytes) references the server: leave the
  // server to the process's exit rather than free it under that thread.
  if (impl_->connections->now() > 0) (void)impl_.release();
}

void Dashboard::publish(DashboardInput in) {
  std::lock_guard g(impl_->in_mu);
  impl_->input = std::move(in);
}

int Dashboard::port() const { return impl_->port; }

std::string Dashboard::url() const {
  const std::string host =
      impl_->cfg.addr.find(':') != std::string::npos ? "[" + impl_->cfg.addr + "]" : impl_->cfg.addr;
  return fmt::format("http://{}:{}/{}", host == "0.0.0.0" || host == "[::]" ? host_name("localhost") : host,
                     impl_->port, impl_->cfg.token.empty() ? "" : "?token=" + impl_->cfg.token);
}

}  // namespace trainbox::dashboard
