// trainbox/util/strings.h — small text helpers shared by the CLI and the probe.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox {

std::string trim(std::string_view s);
std::vector<std::string> split(std::string_view s, char sep, bool skip_empty = true);
bool starts_with(std::string_view s, std::string_view prefix);
bool contains_icase(std::string_view haystack, std::string_view needle);
// Whole file, or nullopt when it cannot be read.
std::optional<std::string> read_file(const std::string& path);
// "1.5 GiB", "64 MiB", "512 B".
std::string human_bytes(std::uint64_t bytes);
// A byte count as people type it (nccl-tests' -b 8 -e 128M): a whole number, optionally
// followed by K, M, G or T (powers of 1024, any case) and an optional "B" or "iB" — so
// "64K", "64KB" and "64KiB" are all 65536: sizes of buffers are binary in practice, and
// one meaning per letter beats guessing what "MB" meant. Spaces around the number and
// before the unit are allowed; fractions ("1.5G"), signs and anything else are not.
// Throws UsageError naming `what` (e.g. "--max-bytes") and the text, with examples as the
// hint, for junk, negative values and values above 2^63 - 1.
//   parse_size("128M", "--max-bytes") == 134217728
std::int64_t parse_size(const std::string& text, const std::string& what);
// Parses "1.2.3" / "580.65.06" into numbers; missing parts are 0. Non-numeric → empty.
std::vector<int> parse_version(std::string_view v);
// a < b → negative, a == b → 0, a > b → positive (component-wise, missing parts 0).
int compare_versions(std::string_view a, std::string_view b);
// Levenshtein distance, for "did you mean" hints.
std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word` (empty if none is reasonably close).
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace trainbox
