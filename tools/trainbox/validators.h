// CLI11 validators whose errors read well: "--maxbytes: not a size: '4Q' (e.g. 8, 64K,
// 128M, 1G)" rather than "Value 4Q not in range 0.000000 to 1797693…". Torch-free.
#pragma once
#include <cmath>
#include <string>

#include <CLI/CLI.hpp>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::cli {

// A byte count or dimension with an optional K/M/G/T suffix (parse_size); the option then
// receives the plain number.
inline CLI::Validator size_value(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        try {
          const auto v = parse_size(text, what);
          if (v <= 0) return "must be positive, got '" + text + "' (e.g. 8, 64K, 128M, 1G)";
          text = std::to_string(v);
          return {};
        } catch (const Error& e) {
          return std::string(e.what()) + (e.hint().empty() ? "" : " (" + e.hint() + ")");
        }
      },
      "SIZE");
}

// A whole number >= min: "must be a whole number >= 1, got 'x'".
inline CLI::Validator whole_number(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        std::size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || v < min)
          return "must be a whole number >= " + std::to_string(min) + ", got '" + text + "'";
        return {};
      },
      "INT");
}

// A finite number > 0: "must be a number > 0, got '0'".
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !(v > 0) || !std::isfinite(v))
          return "must be a number > 0, got '" + text + "'";
        return {};
      },
      "NUMBER");
}

}  // namespace trainbox::cli
