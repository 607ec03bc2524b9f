#include <trainbox/util/errors.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <cstring>
#include <fmt/format.h>

namespace trainbox {

int report_error(const Error& e, const char* program) {
  std::string line = fmt::format("{}: error: {}\n", program, e.what());
  if (!e.hint().empty()) line += fmt::format("  fix: {}\n", e.hint());
  std::fputs(line.c_str(), stderr);
  return e.exit_code();
}

void write_error_file(const std::string& type, const std::string& message) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return;
  nlohmann::json j = {{"message",
                       {{"message", type + ": " + message},
                        {"extraInfo", {{"py_callstack", ""}, {"timestamp", std::to_string(std::time(nullptr))}}}}}};
  std::string dir(path);
  if (auto slash = dir.rfind('/'); slash != std::string::npos) {
    std::error_code ec;
    std::filesystem::create_directories(dir.substr(0, slash), ec);
  }
  if (std::FILE* f = std::fopen(path, "w")) {
    std::fputs(j.dump().c_str(), f);
    std::fclose(f);
  }
}

std::string errno_text(int err) { return fmt::format("{} (errno {})", std::strerror(err), err); }

}  // namespace trainbox
