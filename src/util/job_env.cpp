#include <trainbox/util/job_env.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>
#include <utility>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox {

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

// --- Slurm hostlists ---
namespace {

// One entry of a hostlist ("n[1-2]-ib[3,4]") as literal text and bracket groups, alternating.
struct Range {
  long long lo = 0, hi = 0;
  std::size_t width = 0;  // digits of lo as written: "007" → 3 (zero padding)
};
struct Segment {
  std::string literal;        // used when ranges is empty
  std::vector<Range> ranges;  // a bracket group
  std::size_t count() const {
    if (ranges.empty()) return 1;
    std::size_t n = 0;
    for (const auto& r : ranges) n += static_cast<std::size_t>(r.hi - r.lo + 1);
    return n;
  }
  std::string item(std::size_t k) const {  // k-th name piece of this segment
    if (ranges.empty()) return literal;
    for (const auto& r : ranges) {
      auto n = static_cast<std::size_t>(r.hi - r.lo + 1);
      if (k < n) return fmt::format("{:0{}d}", r.lo + static_cast<long long>(k), r.width);
      k -= n;
    }
    return {};
  }
};
using Pattern = std::vector<Segment>;

[[noreturn]] void bad_hostlist(std::string_view list, const std::string& why) {
  throw UsageError(fmt::format("Slurm hostlist '{}': {}", list, why),
                   "write it as Slurm does, e.g. node[01-04,07],login1 (check with `scontrol show hostnames`)");
}

Range parse_range(std::string_view list, std::string_view text) {
  std::string t = trim(text);
  auto dash = t.find('-');
  std::string lo = trim(t.substr(0, dash)), hi = dash == std::string::npos ? lo : trim(t.substr(dash + 1));
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 18 &&
           std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit((unsigned char)c); });
  };
  if (!digits(lo) || !digits(hi)) bad_hostlist(list, fmt::format("'{}' inside brackets is not a number or range", t));
  Range r{std::stoll(lo), std::stoll(hi), lo.size()};
  if (r.hi < r.lo) bad_hostlist(list, fmt::format("range '{}' goes down", t));
  return r;
}

// Splits at top-level separators (commas and blanks outside brackets) and parses each entry.
std::vector<Pattern> parse_hostlist(std::string_view list, bool first_only = false) {
  std::vector<Pattern> out;
  Pattern cur;
  std::string literal;
  auto end_entry = [&] {
    if (!literal.empty()) cur.push_back(Segment{std::exchange(literal, {}), {}});
    if (!cur.empty()) out.push_back(std::exchange(cur, {}));
  };
  for (std::size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == ',' || std::isspace((unsigned char)c)) {
      end_entry();
      if (first_only && !out.empty()) return out;
      continue;
    }
    if (c == ']') bad_hostlist(list, "']' without '['");
    if (c != '[') {
      literal += c;
      continue;
    }
    auto close = list.find(']', i);
    if (close == std::string_view::npos) bad_hostlist(list, "'[' without ']'");
    std::string_view inner = list.substr(i + 1, close - i - 1);
    if (inner.find('[') != std::string_view::npos) bad_hostlist(list, "brackets inside brackets");
    Segment group;
    for (const auto& item : split(inner, ',', false)) group.ranges.push_back(parse_range(list, item));
    if (!literal.empty()) cur.push_back(Segment{std::exchange(literal, {}), {}});
    cur.push_back(std::move(group));
    i = close;
  }
  end_entry();
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list) {
  std::vector<std::string> hosts;
  for (const Pattern& p : parse_hostlist(list)) {
    std::size_t total = 1;
    for (const auto& s : p) {
      total *= s.count();
      if (total > kMaxHosts) bad_hostlist(list, fmt::format("more than {} names", kMaxHosts));
    }
    if (hosts.size() + total > kMaxHosts) bad_hostlist(list, fmt::format("more than {} names", kMaxHosts));
    // Odometer over the groups, the last one turning fastest (n1-ib3, n1-ib4, n2-ib3, …).
    std::vector<std::size_t> idx(p.size(), 0);
    for (std::size_t n = 0; n < total; ++n) {
      std::string name;
      for (std::size_t s = 0; s < p.size(); ++s) name += p[s].item(idx[s]);
      hosts.push_back(std::move(name));
      for (std::size_t s = p.size(); s-- > 0;) {
        if (++idx[s] < p[s].count()) break;
        idx[s] = 0;
      }
    }
  }
  return hosts;
}

std::string first_host(std::string_view list) {
  auto patterns = parse_hostlist(list, /*first_only=*/true);
  if (patterns.empty()) bad_hostlist(list, "no host in it");
  std::string name;
  for (const auto& s : patterns.front()) name += s.item(0);
  return name;
}

std::vector<int> expand_tasks_per_node(std::string_view text) {
  std::vector<int> out;
  auto bad = [&] {
    throw UsageError(fmt::format("Slurm tasks per node '{}' is not in Slurm's form", text),
                     "expected counts like 8 or 2(x3),1");
  };
  for (const auto& item : split(text, ',')) {
    std::string t = trim(item);
    long long repeat = 1;
    if (auto open = t.find('('); open != std::string::npos) {
      if (t.back() != ')' || t.compare(open, 2, "(x") != 0) bad();
      auto r = parse_integer(t.substr(open + 2, t.size() - open - 3));
      if (!r || *r < 1 || *r > 1 << 20) bad();
      repeat = *r;
      t = t.substr(0, open);
    }
    auto n = parse_integer(t);
    if (!n || *n < 0 || *n > 1 << 20) bad();
    out.insert(out.end(), static_cast<std::size_t>(repeat), static_cast<int>(*n));
  }
  if (out.empty()) bad();
  return out;
}

int slurm_master_port(long long job_id) { return static_cast<int>(10000 + (job_id < 0 ? -job_id : job_id) % 50000); }

// --- GPUs ---
int visible_device_count(const std::optional<std::string>& cvd, int physical) {
  if (!cvd || physical <= 0) return std::max(physical, 0);
  // torch.cuda._parse_visible_devices: a list of UUIDs when the first entry is one (all of
  // the same kind), else of indices; it ends at the first entry that does not fit.
  auto entries = split(*cvd, ',', false);
  const std::string first = trim(entries.front());
  const std::string uuid_prefix = starts_with(first, "GPU-") ? "GPU-" : starts_with(first, "MIG-") ? "MIG-" : "";
  std::set<std::string> seen;
  int visible = 0;
  for (const auto& entry : entries) {
    std::string t = trim(entry);
    if (uuid_prefix.empty()) {
      auto idx = parse_integer(t);
      if (!idx || *idx < 0 || *idx >= physical) break;
      t = std::to_string(*idx);
    } else if (!starts_with(t, uuid_prefix)) {
      break;
    }
    if (!seen.insert(t).second) return 0;  // CUDA refuses a repeated device: none visible
    ++visible;
  }
  return std::min(visible, physical);
}

}  // namespace trainbox
