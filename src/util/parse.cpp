#include <trainbox/util/parse.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include <trainbox/util/strings.h>

namespace trainbox {

namespace {

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

std::string lower(std::string_view s) {
  std::string t(s);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  return t;
}

// The digits from i on; returns how many.
std::size_t skip_digits(const std::string& t, std::size_t& i) {
  const std::size_t start = i;
  while (i < t.size() && is_digit(t[i])) ++i;
  return i - start;
}

// "must be a whole number >= 1", "… from 1 to 65535": the whole accepted set, in words.
std::string whole_number_range(long long lo, long long hi) {
  if (lo == std::numeric_limits<long long>::min() && hi == kNoLimit) return "a whole number";
  if (hi == kNoLimit) return fmt::format("a whole number >= {}", lo);
  return fmt::format("a whole number from {} to {}", lo, hi);
}

}  // namespace

std::string Given::shown() const { return cli ? fmt::format("{} {}", name, text) : fmt::format("{}={}", name, text); }

ParseError::ParseError(const Given& given, std::string allowed, std::string fix)
    : UsageError(fmt::format("{}: must be {}", given.shown(), allowed), fix.empty() ? "pass " + allowed : fix),
      allowed_(std::move(allowed)) {}

// --- quiet cores ---
std::optional<long long> parse_integer(std::string_view text) {
  const std::string t = trim(text);
  std::size_t i = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
  const std::size_t digits = skip_digits(t, i);
  // 18 digits always fit a long long; a longer number is not a count, a port or a job id anyway.
  if (digits == 0 || digits > 18 || i != t.size()) return std::nullopt;
  return std::strtoll(t.c_str(), nullptr, 10);
}

std::optional<double> parse_real(std::string_view text) {
  // The syntax is checked here, not left to strtod, which also takes hex, "inf", "nan" and the
  // locale's decimal comma.
  const std::string t = trim(text);
  std::size_t i = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
  std::size_t mantissa = skip_digits(t, i);
  if (i < t.size() && t[i] == '.') mantissa += skip_digits(t, ++i);
  if (mantissa == 0) return std::nullopt;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    if (++i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
    if (skip_digits(t, i) == 0) return std::nullopt;
  }
  if (i != t.size()) return std::nullopt;
  const double v = std::strtod(t.c_str(), nullptr);
  if (!std::isfinite(v)) return std::nullopt;  // 1e999
  return v;
}

bool is_truthy(std::string_view text) {
  const std::string t = lower(trim(text));
  return t == "1" || t == "true" || t == "yes" || t == "on";
}

bool is_falsey(std::string_view text) {
  const std::string t = lower(trim(text));
  return t == "0" || t == "false" || t == "no" || t == "off";
}

std::optional<bool> parse_bool(std::string_view text) {
  if (is_truthy(text)) return true;
  if (is_falsey(text)) return false;
  return std::nullopt;
}

// --- checked forms ---
long long parse_int(const Given& v, long long lo, long long hi, const std::string& fix) {
  const auto n = parse_integer(v.text);
  if (!n || *n < lo || *n > hi) throw ParseError(v, whole_number_range(lo, hi), fix);
  return *n;
}

double parse_number(const Given& v, double lo, double hi, bool lo_exclusive, const std::string& fix) {
  const auto x = parse_real(v.text);
  if (x && (lo_exclusive ? *x > lo : *x >= lo) && *x <= hi) return *x;
  const char* op = lo_exclusive ? ">" : ">=";
  throw ParseError(v,
                   std::isinf(hi) ? fmt::format("a number {} {:g}", op, lo)
                                  : fmt::format("a number {} {:g} and <= {:g}", op, lo, hi),
                   fix);
}

double parse_seconds(const Given& v, double lo, const std::string& fix) {
  const auto s = parse_real(v.text);
  if (s && *s >= lo && *s <= kMaxSeconds) return *s;
  throw ParseError(v, fmt::format("a number of seconds from {:g} to 1e9", lo), fix);
}

std::int64_t parse_size(const Given& v, std::int64_t lo, const std::string& fix) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const std::string t = trim(v.text);
  auto refuse = [&]() {
    return ParseError(v,
                      fmt::format("a byte count{} (e.g. 8, 64K, 1.5G, 8GiB)", lo > 0 ? fmt::format(" >= {}", lo) : ""),
                      fix.empty() ? "K, M, G and T are powers of 1024 with or without B or iB (8GB = 8GiB = 8 x 2^30 "
                                    "bytes); a fraction needs one of them (1.5G) and is rounded down to whole bytes; "
                                    "a size is at most 2^63 - 1 bytes"
                                  : fix);
  };
  std::size_t i = 0;
  std::uint64_t n = 0;
  for (; i < t.size() && is_digit(t[i]); ++i) {
    const unsigned digit = static_cast<unsigned>(t[i] - '0');
    if (n > (kMax - digit) / 10) throw refuse();
    n = n * 10 + digit;
  }
  if (i == 0) throw refuse();
  // --- a fraction: "1.5G" (up to 18 digits) ---
  std::uint64_t frac = 0, scale = 1;
  if (i < t.size() && t[i] == '.') {
    const std::size_t start = ++i;
    for (; i < t.size() && is_digit(t[i]); ++i) {
      if (i - start >= 18) throw refuse();
      frac = frac * 10 + static_cast<unsigned>(t[i] - '0');
      scale *= 10;
    }
    if (i == start) throw refuse();  // "1.G"
  }
  while (i < t.size() && (t[i] == ' ' || t[i] == '\t')) ++i;

  // --- unit: "", B, K, KB, KiB … (any case) ---
  const std::string unit = lower(t.substr(i));
  int shift = 0;
  if (!unit.empty() && unit != "b") {
    static const std::string kPrefixes = "kmgt";
    const auto p = kPrefixes.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (p == std::string::npos || !(rest.empty() || rest == "b" || rest == "ib")) throw refuse();
    shift = 10 * static_cast<int>(p + 1);
  }
  if (scale > 1 && shift == 0) throw refuse();  // "1.5" or "1.5B": a byte count is whole
  if (n > (kMax >> shift)) throw refuse();
  // frac / scale x 2^shift, rounded down, one bit at a time (exact: the remainder stays below 2 x 10^18)
  std::uint64_t part = 0, rem = frac;
  for (int b = 0; b < shift; ++b) {
    rem *= 2;
    part = part * 2 + (rem >= scale ? 1 : 0);
    if (rem >= scale) rem -= scale;
  }
  const std::uint64_t whole = n << shift;
  if (whole > kMax - part) throw refuse();
  const auto bytes = static_cast<std::int64_t>(whole + part);
  if (bytes < lo) throw refuse();
  return bytes;
}

bool parse_bool(const Given& v, const std::string& fix) {
  if (auto b = parse_bool(v.text)) return *b;
  throw ParseError(v, "1 or 0 (or true/false, yes/no, on/off)", fix);
}

}  // namespace trainbox
