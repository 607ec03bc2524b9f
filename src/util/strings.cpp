#include <trainbox/util/strings.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <trainbox/util/parse.h>

namespace trainbox {

std::string trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split(std::string_view s, char sep, bool skip_empty) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    auto part = s.substr(start, end - start);
    if (!part.empty() || !skip_empty) out.emplace_back(part);
    start = end + 1;
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool contains_icase(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower((unsigned char)a) == std::tolower((unsigned char)b);
  });
  return it != haystack.end();
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

std::string human_bytes(std::uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return v >= 100 ? fmt::format("{:.0f} {}", v, kUnits[u]) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

std::vector<int> parse_version(std::string_view v) {
  std::vector<int> out;
  for (const auto& part : split(v, '.', false)) {
    if (part.empty() || !std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit((unsigned char)c); }))
      return {};
    const auto n = parse_integer(part);  // 18 digits at most: "99999999999" is junk, not a crash
    if (!n || *n > std::numeric_limits<int>::max()) return {};
    out.push_back(static_cast<int>(*n));
  }
  return out;
}

int compare_versions(std::string_view a, std::string_view b) {
  auto va = parse_version(a), vb = parse_version(b);
  for (std::size_t i = 0; i < std::max(va.size(), vb.size()); ++i) {
    int x = i < va.size() ? va[i] : 0, y = i < vb.size() ? vb[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    auto d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Accept up to a third of the word's length in edits (at least 2): "lr" vs "lrr", "epochs" vs "epoch".
  return best_d <= std::max<std::size_t>(2, word.size() / 3) ? best : std::string{};
}

}  // namespace trainbox
