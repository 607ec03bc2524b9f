// toml_text.h (private to src/train) — toml::parse behind a check for a toml++ 3.3.0 bug.
//
// toml++ 3.3.0 (Debian 12's libtomlplusplus-dev) tests whether a character is whitespace
// with a lookup whose default case is marked unreachable; a non-ASCII character where the
// parser skips whitespace (outside strings and comments, or first on the line after a
// line-ending backslash in a """ string) reaches it: undefined behaviour in a release build
// (marzer/tomlplusplus#190, fixed upstream by #305; found here by tests/fuzz/fuzz_config).
// Non-ASCII text is invalid TOML in those places anyway, so parse_toml() rejects it first,
// with the same toml::parse_error toml++ would throw; strings and comments may hold any UTF-8.
//   toml::table t = parse_toml(text, "config.toml");   // throws toml::parse_error
#pragma once
#include <string_view>

#include <toml++/toml.h>

namespace trainbox::train {

toml::table parse_toml(std::string_view text, std::string_view origin = {});

}  // namespace trainbox::train
