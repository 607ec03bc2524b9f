#include <trainbox/util/errors.h>

#include <cstdio>
#include <cstring>
#include <fmt/format.h>

namespace trainbox {

int report_error(const Error& e, const char* program) {
  std::string line = fmt::format("{}: error: {}\n", program, e.what());
  if (!e.hint().empty()) line += fmt::format("  fix: {}\n", e.hint());
  std::fputs(line.c_str(), stderr);
  return e.exit_code();
}

std::string errno_text(int err) { return fmt::format("{} (errno {})", std::strerror(err), err); }

}  // namespace trainbox
