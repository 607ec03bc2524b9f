// CLI11 validators whose errors read well: "--tokens: must be a whole number >= 1, got '0'"
// rather than "Value 0 not in range 1 to 9223372036854775807". The parsing and the words are
// util/parse.h's, as for every other value; CLI11 writes the "--flag: " before them. Torch-free.
#pragma once
#include <limits>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <trainbox/util/parse.h>

namespace trainbox::cli {

namespace detail {
// A validator from a parse.h checked form; `parse` returns the value as the option should
// receive it ("64K" → "65536").
template <typename Parse>
CLI::Validator parsed(const std::string& kind, Parse parse) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          text = parse(Given{text, "", true});
          return {};
        } catch (const ParseError& e) {
          return fmt::format("must be {}, got '{}'", e.allowed(), text);
        }
      },
      kind);
}
}  // namespace detail

// A byte count or dimension >= 1 with an optional K/M/G/T suffix (parse.h's sizes); the
// option then receives the plain number.
inline CLI::Validator size_value() {
  return detail::parsed("SIZE", [](const Given& v) { return std::to_string(parse_size(v, 1)); });
}

// A whole number >= min: "must be a whole number >= 1, got 'x'".
inline CLI::Validator whole_number(long long min) {
  return detail::parsed("INT", [min](const Given& v) { return std::to_string(parse_int(v, min)); });
}

// A finite number >= 0: "must be a number >= 0, got '-1'".
inline CLI::Validator nonnegative_number() {
  return detail::parsed("NUMBER", [](const Given& v) {
    parse_number(v, 0, std::numeric_limits<double>::infinity());
    return v.text;
  });
}

// A finite number > 0: "must be a number > 0, got '0'".
inline CLI::Validator positive_number() {
  return detail::parsed("NUMBER", [](const Given& v) {
    parse_number(v, 0, std::numeric_limits<double>::infinity(), /*lo_exclusive=*/true);
    return v.text;  // as typed: CLI11 converts it, and "0.1" stays exactly what the user wrote
  });
}

}  // namespace trainbox::cli
