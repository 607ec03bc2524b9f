// The dashboard's pure half: the address and token rules, redaction, and the two renderings of
// one DashboardState (JSON for the page, the Prometheus text format for scrapers).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/env/probe.h>
#include <trainbox/dashboard/dashboard.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox::dashboard {

DashboardConfig resolve_dashboard(const std::string& spec, const std::string& token, const std::string& env_token,
                                  DashboardServer server) {
  // The messages name the options of the command the user typed: trainbox dash builds the spec
  // from --addr and --port, trainbox run takes it whole from --dashboard.
  const bool dash = server == DashboardServer::kDash;
  DashboardConfig c;
  std::string port_text = spec;
  const auto bad = [&](const std::string& what) {
    if (dash)
      return UsageError("trainbox dash " + what, "pass --addr ADDR and --port PORT, e.g. --addr 127.0.0.1 --port 8265");
    return UsageError("--dashboard " + spec + ": " + what,
                      "pass --dashboard PORT (loopback) or ADDR:PORT, e.g. --dashboard 127.0.0.1:8265");
  };
  if (!spec.empty() && spec.front() == '[') {  // [IPv6]:PORT
    const auto close = spec.find("]:");
    if (close == std::string::npos) throw bad(dash ? "--addr " + spec + ": not an address" : "expected [ADDR]:PORT");
    c.addr = spec.substr(1, close - 1);
    port_text = spec.substr(close + 2);
  } else if (const auto colon = spec.rfind(':'); colon != std::string::npos) {
    c.addr = spec.substr(0, colon);
    port_text = spec.substr(colon + 1);
  }
  const auto port = parse_integer(port_text);  // util/parse.h
  if (!port || *port < 0 || *port > 65535 || c.addr.empty())
    throw bad(!dash            ? "expected [ADDR:]PORT with a port 0..65535"
              : c.addr.empty() ? "--addr '': expected an address"
                               : "--port " + port_text + ": expected a port 0..65535");
  c.port = static_cast<int>(*port);
  c.token = !token.empty() ? token : env_token;
  if (is_loopback_host(c.addr) || !c.token.empty()) return c;
  if (dash)
    throw UsageError(fmt::format("trainbox dash --addr {}: binding to {} (not loopback) needs a token", c.addr, c.addr),
                     fmt::format("pass --token TOKEN or set {} (e.g. $(openssl rand -hex 16)); or leave --addr at "
                                 "127.0.0.1 and reach it through ssh -L",
                                 kDashboardTokenEnv));
  throw UsageError(fmt::format("--dashboard {}: binding to {} (not loopback) needs a token", spec, c.addr),
                   fmt::format("pass --dashboard-token TOKEN or set {} (e.g. $(openssl rand -hex 16)); or "
                               "bind 127.0.0.1 and reach it through ssh -L",
                               kDashboardTokenEnv));
}

bool token_matches(std::string_view expected, std::string_view given) {
  if (expected.empty()) return true;
  // Constant time in the contents: every byte of the longer one is looked at.
  unsigned diff = expected.size() == given.size() ? 0u : 1u;
  const std::size_t n = std::max(expected.size(), given.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char a = i < expected.size() ? expected[i] : 0, b = i < given.size() ? given[i] : 0;
    diff |= static_cast<unsigned>(a ^ b);
  }
  return diff == 0;
}

// --- redaction ---
std::string redact_line(std::string line) {
  // NAME=value and NAME: value where NAME looks like a secret: the value up to the next space.
  for (std::size_t pos = 0; pos < line.size();) {
    const std::size_t sep = line.find_first_of("=:", pos);
    if (sep == std::string::npos) break;
    std::size_t start = sep;
    while (start > 0 && (std::isalnum(static_cast<unsigned char>(line[start - 1])) || line[start - 1] == '_' ||
                         line[start - 1] == '-'))
      --start;
    std::size_t v = sep + 1;
    if (line[sep] == ':' && v < line.size() && line[v] == ' ') ++v;
    std::size_t v_end = line.find(' ', v);
    if (v_end == std::string::npos) v_end = line.size();
    if (start < sep && v < v_end && env::looks_secret(line.substr(start, sep - start))) {
      line.replace(v, v_end - v, "<redacted>");
      pos = v + 10;
    } else {
      pos = sep + 1;
    }
  }
  return line;
}

std::string redact_command(const std::vector<std::string>& argv) {
  std::string out;
  bool hide_next = false;
  for (const auto& a : argv) {
    std::string shown = a;
    if (hide_next) {
      shown = "<redacted>";
      hide_next = false;
    } else if (a.size() > 1 && a[0] == '-' && a.find('=') == std::string::npos && env::looks_secret(a)) {
      hide_next = true;  // --api-key VALUE
    } else {
      shown = redact_line(a);
    }
    if (!out.empty()) out += ' ';
    out += shown.find(' ') != std::string::npos ? "'" + shown + "'" : shown;
  }
  return out;
}

std::string run_dir_of(const std::vector<std::string>& argv, const std::string& given) {
  if (!given.empty()) return given;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    for (const std::string opt : {"--run-dir", "--resume"}) {
      if (argv[i] == opt && i + 1 < argv.size() && argv[i + 1] != "auto") return argv[i + 1];
      if (starts_with(argv[i], opt + "=") && argv[i] != opt + "=auto") return argv[i].substr(opt.size() + 1);
    }
  }
  return "";
}

// --- Prometheus text format 0.0.4 ---
std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

struct Family {
  const char* name;
  const char* help;
};

void header(std::string& out, const Family& f) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", f.name, f.help, f.name);
}

std::string rank_labels(const DashRank& r) {
  return fmt::format("rank=\"{}\",local_rank=\"{}\",node=\"{}\",host=\"{}\"", r.rank, r.local_rank, r.node_rank,
                     escape_label_value(r.host));
}

// dcgm-exporter's labels in Prometheus' snake_case (its UUID, modelName and Hostname fail
// `promtool check metrics`); docs/dashboard.md has the relabelling for its Grafana boards.
std::string gpu_labels(const DashGpu& g) {
  return fmt::format("gpu=\"{}\",uuid=\"{}\",device=\"nvidia{}\",model_name=\"{}\",hostname=\"{}\"", g.index,
                     escape_label_value(g.uuid), g.index, escape_label_value(g.name), escape_label_value(g.host));
}

double known(double v) { return v < 0 ? std::nan("") : v; }

}  // namespace

std::string render_prometheus(const DashboardState& s) {
  std::string out;
  header(out, {"trainbox_job_info", "The job trainbox run supervises (value 1)."});
  out +=
      fmt::format("trainbox_job_info{{run_id=\"{}\",host=\"{}\",status=\"{}\"}} 1\n", escape_label_value(s.job.run_id),
                  escape_label_value(s.job.host), escape_label_value(s.job.status));
  header(out, {"trainbox_world_size", "Ranks in the job."});
  out += fmt::format("trainbox_world_size {}\n", s.job.world_size);
  const Family per_rank[] = {
      {"trainbox_step", "Optimizer steps the rank reported in its last heartbeat."},
      {"trainbox_samples_per_second", "Samples per second of the rank over the last ~10 s (NaN: unknown)."},
      {"trainbox_steps_per_second", "Steps per second of the rank over the last ~10 s (NaN: unknown)."},
      {"trainbox_heartbeat_age_seconds", "Seconds since the rank's heartbeat record last changed (NaN: none yet)."},
      {"trainbox_stalled", "1 while the rank is stalled by trainbox run's rule (launch/stall.h), else 0."},
      {"trainbox_restarts", "Restarts of the job so far (TORCHELASTIC_RESTART_COUNT of the running attempt)."},
  };
  for (std::size_t f = 0; f < std::size(per_rank); ++f) {
    header(out, per_rank[f]);
    for (const auto& r : s.ranks) {
      const double v[] = {static_cast<double>(r.step), known(r.samples_per_s), known(r.steps_per_s),
                          known(r.heartbeat_age_s),    r.stalled ? 1.0 : 0.0,  static_cast<double>(s.job.attempt)};
      out += fmt::format("{}{{{}}} {}\n", per_rank[f].name, rank_labels(r), number(v[f]));
    }
  }
  // The gradient exchange (train/types.h CommFigures), once trainbox train has logged a window.
  const Family comm[] = {
      {"trainbox_comm_sent_bytes_per_step",
       "Bytes the rank sent per optimizer step, every collective by the ring model (last metrics.jsonl window)."},
      {"trainbox_comm_wait_seconds_per_step", "Seconds per step the rank was blocked waiting for a collective."},
      {"trainbox_compression_ratio",
       "An uncompressed fp32 gradient allreduce's bytes over the bytes sent (dist.grad_compression)."},
  };
  const bool have_comm =
      std::any_of(s.ranks.begin(), s.ranks.end(), [](const DashRank& r) { return r.comm_sent_bytes_per_step >= 0; });
  for (std::size_t f = 0; f < std::size(comm) && have_comm; ++f) {
    header(out, comm[f]);
    for (const auto& r : s.ranks) {
      const double v[] = {known(r.comm_sent_bytes_per_step), known(r.comm_wait_s_per_step), known(r.compression_ratio)};
      out += fmt::format("{}{{{},compression=\"{}\"}} {}\n", comm[f].name, rank_labels(r),
                         escape_label_value(s.job.compression), number(v[f]));
    }
  }
  // A mixture of experts' routing (metrics.jsonl's "moe"), once a train line carried it.
  if (!s.moe_imbalance.empty()) {
    header(out,
           {"trainbox_moe_load_imbalance",
            "A mixture of experts' layer: its busiest expert's tokens over the mean (1 = balanced; last window)."});
    for (std::size_t l = 0; l < s.moe_imbalance.size(); ++l)
      out += fmt::format("trainbox_moe_load_imbalance{{layer=\"{}\"}} {}\n", l, number(s.moe_imbalance[l]));
  }
  if (!s.moe_tokens.empty()) {
    header(out, {"trainbox_moe_expert_tokens",
                 "Tokens routed to the expert over the last metrics.jsonl window, summed over the ranks."});
    for (std::size_t l = 0; l < s.moe_tokens.size(); ++l)
      for (std::size_t e = 0; e < s.moe_tokens[l].size(); ++e)
        out += fmt::format("trainbox_moe_expert_tokens{{layer=\"{}\",expert=\"{}\"}} {}\n", l, e,
                           number(s.moe_tokens[l][e]));
  }
  // Per GPU, with DCGM's field names and units (dcgm-exporter's default counters).
  const Family per_gpu[] = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %), from NVML."},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %), from NVML."},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB), from NVML."},
      {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB), from NVML."},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C), from NVML."},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W), from NVML."},
  };
  for (std::size_t f = 0; f < std::size(per_gpu) && !s.gpus.empty(); ++f) {
    header(out, per_gpu[f]);
    for (const auto& g : s.gpus) {
      const double mib = 1024.0 * 1024.0;
      const double v[] = {known(g.util_pct),
                          known(g.mem_util_pct),
                          g.mem_used_bytes < 0 ? std::nan("") : std::floor(g.mem_used_bytes / mib),
                          g.mem_used_bytes < 0 || g.mem_total_bytes < 0
                              ? std::nan("")
                              : std::floor((g.mem_total_bytes - g.mem_used_bytes) / mib),
                          known(g.temperature_c),
                          known(g.power_w)};
      out += fmt::format("{}{{{}}} {}\n", per_gpu[f].name, gpu_labels(g), number(v[f]));
    }
  }
  return out;
}

// --- JSON for the page ---
namespace {
nlohmann::json maybe(double v) { return v < 0 || std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }
}  // namespace

std::string render_state_json(const DashboardState& s) {
  using nlohmann::json;
  const DashJob& j = s.job;
  json out = {{"job",
               {{"command", j.command},
                {"run_id", j.run_id},
                {"host", j.host},
                {"status", j.status},
                {"nnodes", j.nnodes},
                {"world_size", j.world_size},
                {"node_rank", j.node_rank},
                {"attempt", j.attempt},
                {"restarts", j.attempt},
                {"max_restarts", j.max_restarts},
                {"stall_timeout_s", j.stall_timeout_s},
                {"uptime_s", j.uptime_s},
                {"stall_headline", j.stall_headline},
                {"root_cause", j.root_cause},
                {"exit_code", j.exit_code < 0 ? json(nullptr) : json(j.exit_code)},
                {"root_cause_rank", j.root_cause_rank < 0 ? json(nullptr) : json(j.root_cause_rank)},
                {"run_dir", j.run_dir},
                {"metrics_path", j.metrics_path},
                {"samples_per_s", maybe(j.samples_per_s)},
                {"log_rank", j.log_rank < 0 ? json(nullptr) : json(j.log_rank)}}}};
  json ranks = json::array();
  for (const auto& r : s.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"local_rank", r.local_rank},
                     {"node_rank", r.node_rank},
                     {"host", r.host},
                     {"pid", r.pid},
                     {"reporting", r.reporting},
                     {"finished", r.finished},
                     {"stalled", r.stalled},
                     {"culprit", r.culprit},
                     {"step", r.step},
                     {"phase", r.phase},
                     {"state", std::string(1, r.state)},
                     {"heartbeat_age_s", maybe(r.heartbeat_age_s)},
                     {"steps_per_s", maybe(r.steps_per_s)},
                     {"samples_per_s", maybe(r.samples_per_s)},
                     {"comm_sent_bytes_per_step", maybe(r.comm_sent_bytes_per_step)},
                     {"comm_wait_s_per_step", maybe(r.comm_wait_s_per_step)},
                     {"compression_ratio", maybe(r.compression_ratio)}});
  out["ranks"] = std::move(ranks);
  json gpus = json::array();
  for (const auto& g : s.gpus)
    gpus.push_back({{"host", g.host},
                    {"index", g.index},
                    {"name", g.name},
                    {"uuid", g.uuid},
                    {"util_pct", maybe(g.util_pct)},
                    {"mem_util_pct", maybe(g.mem_util_pct)},
                    {"mem_used_bytes", maybe(static_cast<double>(g.mem_used_bytes))},
                    {"mem_total_bytes", maybe(static_cast<double>(g.mem_total_bytes))},
                    {"temperature_c", maybe(g.temperature_c)},
                    {"power_w", maybe(g.power_w)}});
  out["gpus"] = std::move(gpus);
  out["gpus_known"] = s.gpus_known;
  out["gpu_note"] = s.gpu_note;
  json curves = json::object();
  for (const auto& c : s.curves) {
    json pts = json::array();
    for (const auto& [x, y] : c.points) pts.push_back({x, std::isfinite(y) ? json(y) : json(nullptr)});
    curves[c.name] = std::move(pts);
  }
  out["curves"] = std::move(curves);
  if (!s.moe_imbalance.empty() || !s.moe_tokens.empty()) {
    json imbalance = json::array();
    for (double v : s.moe_imbalance) imbalance.push_back(std::isfinite(v) ? json(v) : json(nullptr));
    out["moe"] = {{"tokens", s.moe_tokens}, {"imbalance", imbalance}};
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace trainbox::dashboard
