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
// Parses "1.2.3" / "580.65.06" into numbers; missing parts are 0. Non-numeric → empty.
std::vector<int> parse_version(std::string_view v);
// a < b → negative, a == b → 0, a > b → positive (component-wise, missing parts 0).
int compare_versions(std::string_view a, std::string_view b);
// Levenshtein distance, for "did you mean" hints.
std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word` (empty if none is reasonably close).
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace trainbox
