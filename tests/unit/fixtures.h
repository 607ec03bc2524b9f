// Test helpers: load the EnvReport fixtures in tests/fixtures/.
#pragma once
#include <string>

#include <trainbox/env/report.h>
#include <trainbox/util/strings.h>

namespace trainbox::test {

inline std::string source_dir() { return TRAINBOX_SOURCE_DIR; }
inline std::string fixture_path(const std::string& name) { return source_dir() + "/tests/fixtures/" + name; }
inline std::string fixture_text(const std::string& name) {
  auto t = read_file(fixture_path(name));
  if (!t) throw std::runtime_error("missing fixture " + fixture_path(name));
  return *t;
}
inline env::EnvReport fixture(const std::string& name) { return env::report_from_json(fixture_text(name)); }

}  // namespace trainbox::test
