#include <trainbox/util/errors.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <cstring>
#include <fmt/format.h>

#include <trainbox/util/fatal_origin.h>
#include <trainbox/util/net.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/worker_error.h>

namespace trainbox {

namespace {

std::optional<long long> env_integer(const char* name) {
  const char* v = std::getenv(name);
  return v ? parse_integer(v) : std::nullopt;
}

std::atomic<bool> g_job_spans_nodes{false};

}  // namespace

void set_job_spans_nodes(bool spans) { g_job_spans_nodes = spans; }

std::string fatal_origin() {
  const auto nodes = env_integer("GROUP_WORLD_SIZE"), slurm_nodes = env_integer("SLURM_NNODES");
  if (!g_job_spans_nodes && !(nodes && *nodes > 1) && !(slurm_nodes && *slurm_nodes > 1)) return "";
  const std::string host = host_name("unknown-host");
  const auto rank = env_integer("RANK");  // a worker's (trainbox run, torchrun); srun's own tasks: the host alone
  return rank ? fmt::format("{} rank {}", host, *rank) : host;
}

std::string fatal_line_start(const char* program, const char* kind) {
  const std::string origin = fatal_origin();
  return origin.empty() ? fmt::format("{}: {}: ", program, kind) : fmt::format("{}: {} [{}]: ", program, kind, origin);
}

int report_error(const Error& e, const char* program) {
  std::string line = fatal_line_start(program) + e.what() + "\n";
  if (!e.hint().empty()) line += fmt::format("  fix: {}\n", e.hint());
  std::fputs(line.c_str(), stderr);
  return e.exit_code();
}

namespace {
// write_error_file's body; false when there is no error file or it could not be written.
bool write_error_file_ok(const std::string& type, const std::string& message) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return false;
  nlohmann::json j = {{"message",
                       {{"message", type + ": " + message},
                        {"extraInfo", {{"py_callstack", ""}, {"timestamp", std::to_string(std::time(nullptr))}}}}}};
  std::string dir(path);
  if (auto slash = dir.rfind('/'); slash != std::string::npos) {
    std::error_code ec;
    std::filesystem::create_directories(dir.substr(0, slash), ec);
  }
  std::FILE* f = std::fopen(path, "w");
  if (!f) return false;
  const bool put = std::fputs(j.dump().c_str(), f) >= 0;
  return std::fclose(f) == 0 && put;
}
}  // namespace

void write_error_file(const std::string& type, const std::string& message) { (void)write_error_file_ok(type, message); }

int report_worker_error(const Error& e, bool error_file, const char* program) {
  const bool written =
      error_file && write_error_file_ok("trainbox.Error",
                                        std::string(e.what()) + (e.hint().empty() ? "" : " (fix: " + e.hint() + ")"));
  const char* launcher_says = std::getenv(kLauncherSaysUsageErrorsEnv);
  if (written && e.exit_code() == kExitUsage && launcher_says && std::string(launcher_says) == "1")
    return e.exit_code();  // trainbox run prints it once for every rank
  return report_error(e, program);
}

std::string errno_text(int err) { return fmt::format("{} (errno {})", std::strerror(err), err); }

}  // namespace trainbox
