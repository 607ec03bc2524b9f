#include <trainbox/bench/report.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::bench {

double algbw_gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

double busbw_factor(Collective c, int n) {
  if (n <= 0) return 0;
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return double(n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce: return 1.0;
  }
  return 1.0;
}

double busbw_gbps(Collective c, double bytes, double seconds, int ranks) {
  return algbw_gbps(bytes, seconds) * busbw_factor(c, ranks);
}

double tflops_gemm(std::int64_t m, std::int64_t n, std::int64_t k, double seconds) {
  return seconds > 0 ? 2.0 * double(m) * double(n) * double(k) / seconds / 1e12 : 0;
}

double copy_gbps(double bytes, double seconds) { return algbw_gbps(bytes, seconds); }

double percent_of(double measured, double reference) { return reference > 0 ? 100.0 * measured / reference : 0; }

Stats summarize(std::vector<double> s) {
  Stats st;
  if (s.empty()) return st;
  std::sort(s.begin(), s.end());
  st.min = s.front();
  st.max = s.back();
  st.median = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  return st;
}

BenchReport::BenchReport(std::string name, std::FILE* live) : name_(std::move(name)), live_(live) {}
void BenchReport::header(const std::string& k, const std::string& v) {
  header_.emplace_back(k, v);
  if (live_ && live_started_) {  // a fact learnt mid-run: printed where it was learnt
    fmt::print(live_, "# {}: {}\n", k, v);
    std::fflush(live_);
  }
}
void BenchReport::columns(std::vector<std::string> names) {
  columns_ = std::move(names);
  if (!live_) return;
  fmt::print(live_, "# trainbox bench {}\n", name_);
  for (const auto& [k, v] : header_) fmt::print(live_, "# {}: {}\n", k, v);
  live_widths_.clear();
  std::string line = "#";
  for (const auto& c : columns_) {
    live_widths_.push_back(std::max(c.size(), kLiveWidth));
    line += fmt::format(" {:>{}}", c, live_widths_.back());
  }
  fmt::print(live_, "{}\n", line);
  std::fflush(live_);
  live_started_ = true;
}
void BenchReport::footer(const std::string& line) { footers_.push_back(line); }
void BenchReport::fail(const std::string& why) {
  failures_.push_back(why);
  footers_.push_back("# CHECK FAILED: " + why);
}

void BenchReport::add(std::vector<nlohmann::json> row) {
  if (row.size() != columns_.size())
    throw SystemError(fmt::format("bench {}: a row of {} values for {} columns", name_, row.size(), columns_.size()));
  rows_.push_back(std::move(row));
  if (!live_ || !live_started_) return;
  std::string line = " ";
  for (std::size_t c = 0; c < columns_.size(); ++c)
    line += fmt::format(" {:>{}}", format_cell(rows_.back()[c]), live_widths_[c]);
  fmt::print(live_, "{}\n", line);
  std::fflush(live_);
}

void BenchReport::finish() const {
  if (!live_) return;
  if (!live_started_) {  // no columns were declared: nothing went out yet
    fmt::print(live_, "{}\n", render());
  } else {
    for (const auto& f : footers_) fmt::print(live_, "{}\n", f);
    fmt::print(live_, "\n");
  }
  std::fflush(live_);
}

std::string format_cell(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d != 0 && std::fabs(d) < 0.01) return fmt::format("{:.3g}", d);
    return fmt::format("{:.2f}", d);
  }
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

std::string BenchReport::render() const {
  std::string out;
  out += fmt::format("# trainbox bench {}\n", name_);
  for (const auto& [k, v] : header_) out += fmt::format("# {}: {}\n", k, v);
  std::vector<std::size_t> w(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    w[c] = columns_[c].size();
    for (const auto& r : rows_) w[c] = std::max(w[c], format_cell(r[c]).size());
  }
  std::string line = "#";
  for (std::size_t c = 0; c < columns_.size(); ++c) line += fmt::format(" {:>{}}", columns_[c], w[c]);
  out += line + "\n";
  for (const auto& r : rows_) {
    line = " ";
    for (std::size_t c = 0; c < columns_.size(); ++c) line += fmt::format(" {:>{}}", format_cell(r[c]), w[c]);
    out += line + "\n";
  }
  for (const auto& f : footers_) out += f + "\n";
  return out;
}

nlohmann::json BenchReport::to_json() const {
  nlohmann::json h = nlohmann::json::object();
  for (const auto& [k, v] : header_) h[k] = v;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : rows_) {
    nlohmann::json o = nlohmann::json::object();
    for (std::size_t c = 0; c < columns_.size(); ++c) o[columns_[c]] = r[c];
    rows.push_back(o);
  }
  return {{"bench", name_},     {"header", h},        {"columns", columns_},  {"rows", rows},
          {"footer", footers_}, {"failed", failed()}, {"failures", failures_}};
}

}  // namespace trainbox::bench
