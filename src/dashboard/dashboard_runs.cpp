// trainbox dash's pure half: run dirs found and named, config.toml flattened and compared, the
// runs rendered as JSON for the page (dashboard/dashboard.h; docs/dashboard.md, "trainbox dash").
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <trainbox/dashboard/dashboard.h>
#include <trainbox/util/errors.h>

namespace trainbox::dashboard {

namespace {

namespace fs = std::filesystem;

// A value as config.toml writes it, floats in their shortest round-trip form ("0.1", not toml++'s
// 17 digits "0.10000000000000001"), so equal settings compare equal and read as typed.
std::string value_text(const toml::node& v) {
  if (const auto* arr = v.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < arr->size(); ++i) out += (i ? ", " : "") + value_text(*arr->get(i));
    return out + "]";
  }
  if (const auto* d = v.as_floating_point()) {
    std::string out = fmt::format("{}", d->get());
    if (out.find_first_of(".eEni") == std::string::npos) out += ".0";
    return out;
  }
  if (const auto* str = v.as_string()) return nlohmann::json(str->get()).dump();  // "mlp", as config.toml writes it
  std::ostringstream text;                                                        // integers, booleans, dates as TOML
  v.visit([&](const auto& node) { text << node; });
  return text.str();
}

void flatten(const toml::table& t, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = v.as_table()) {
      flatten(*sub, key, out);
      continue;
    }
    out[key] = value_text(v);
  }
}

bool is_run_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p / "metrics.jsonl", ec) || fs::is_regular_file(p / "config.toml", ec);
}

std::time_t mtime_of(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_mtime : 0;
}

}  // namespace

std::map<std::string, std::string> flatten_config_toml(std::string_view text) {
  std::map<std::string, std::string> out;
  try {
    flatten(toml::parse(text), "", out);
  } catch (const toml::parse_error&) {
    out.clear();
  }
  return out;
}

std::vector<ConfigDiffRow> config_diff(const std::vector<DashRun>& runs) {
  std::set<std::string> keys;
  for (const auto& r : runs)
    for (const auto& kv : r.config) keys.insert(kv.first);
  std::vector<ConfigDiffRow> out;
  for (const auto& k : keys) {
    ConfigDiffRow row{k, {}};
    for (const auto& r : runs) {
      const auto it = r.config.find(k);
      row.values.push_back(it == r.config.end() ? std::nullopt : std::optional<std::string>(it->second));
    }
    // A run whose config.toml is not there yet (or unreadable) differs in nothing.
    std::vector<std::optional<std::string>> known;
    for (std::size_t i = 0; i < runs.size(); ++i)
      if (!runs[i].config.empty()) known.push_back(row.values[i]);
    if (std::adjacent_find(known.begin(), known.end(), std::not_equal_to<>()) != known.end())
      out.push_back(std::move(row));
  }
  return out;
}

std::string render_runs_json(const RunsState& s) {
  using nlohmann::json;
  json runs = json::array();
  for (const auto& r : s.runs) {
    json curves = json::object();
    for (const auto& c : r.curves) {
      json pts = json::array();
      for (const auto& [x, y] : c.points) pts.push_back({x, std::isfinite(y) ? json(y) : json(nullptr)});
      curves[c.name] = std::move(pts);
    }
    json comm = nullptr;  // what a comparison of compression settings compares: bytes, ratio, time waiting
    if (r.comm)
      comm = {{"compression", r.comm->compression},
              {"sent_bytes_per_step", r.comm->sent_bytes_per_step},
              {"fp32_bytes_per_step", r.comm->fp32_bytes_per_step},
              {"compression_ratio", r.comm->compression_ratio},
              {"wait_s_per_step", r.comm->wait_s_per_step},
              {"whole_run", r.comm->whole_run}};
    runs.push_back({{"name", r.name},
                    {"dir", r.dir},
                    {"status", r.status},
                    {"last_step", r.last_step},
                    {"config_found", !r.config.empty()},
                    {"curves", std::move(curves)},
                    {"comm", std::move(comm)}});
  }
  json diff = json::array();
  for (const auto& d : s.config_diff) {
    json values = json::array();
    for (const auto& v : d.values) values.push_back(v ? json(*v) : json(nullptr));
    diff.push_back({{"key", d.key}, {"values", std::move(values)}});
  }
  json out = {{"mode", "runs"},
              {"uptime_s", s.uptime_s},
              {"runs", std::move(runs)},
              {"config_keys", s.config_keys},
              {"config_diff", std::move(diff)}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<std::string> expand_run_dirs(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  const char* hint =
      "name trainbox train run dirs (each holds metrics.jsonl and config.toml), or a folder of them "
      "such as runs/";
  for (const auto& a : args) {
    std::error_code ec;
    const fs::path p = fs::absolute(a, ec).lexically_normal();
    if (!fs::is_directory(p, ec)) throw UsageError("trainbox dash: " + a + " is not a folder", hint);
    if (is_run_dir(p)) {
      out.push_back(p.string());
      continue;
    }
    std::vector<std::pair<std::time_t, std::string>> found;  // a folder of runs: oldest first
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_directory(ec) && is_run_dir(e.path())) found.emplace_back(mtime_of(e.path()), e.path().string());
    if (found.empty()) throw UsageError("trainbox dash: " + a + " holds no metrics.jsonl or config.toml", hint);
    std::sort(found.begin(), found.end());
    for (auto& f : found) out.push_back(std::move(f.second));
  }
  std::vector<std::string> unique;
  for (auto& d : out)
    if (std::find(unique.begin(), unique.end(), d) == unique.end()) unique.push_back(std::move(d));
  if (unique.size() > kMaxRuns)
    throw UsageError(fmt::format("trainbox dash: {} runs named, at most {} are served", unique.size(), kMaxRuns),
                     "name fewer run dirs (or a folder with fewer runs)");
  return unique;
}

std::vector<std::string> run_names(const std::vector<std::string>& dirs) {
  std::vector<std::string> base, names;
  for (const auto& d : dirs) base.push_back(fs::path(d).filename().string());
  for (std::size_t i = 0; i < dirs.size(); ++i) {
    const fs::path p(dirs[i]);
    names.push_back(std::count(base.begin(), base.end(), base[i]) < 2
                        ? base[i]
                        : (p.parent_path().filename() / p.filename()).string());
  }
  return names;
}

}  // namespace trainbox::dashboard
