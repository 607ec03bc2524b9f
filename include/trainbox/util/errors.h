// trainbox/util/errors.h — typed exceptions and the exit-code contract.
//
// The library throws; only a program's main() catches, prints one line (what is
// wrong, then how to fix it) and picks the exit code:
//   0 ok · 1 the job failed (a check found errors, training diverged)
//   2 usage or bad input (CLI value, config, dataset, checkpoint) — nothing half-written
//
//   try { run(); }
//   catch (const trainbox::Error& e) { return trainbox::report_error(e); }
#pragma once
#include <stdexcept>
#include <string>

namespace trainbox {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Base: a message (what is wrong, naming the bad value) and a hint (how to fix it).
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, std::string hint = {}, int exit_code = kExitFailed)
      : std::runtime_error(what), hint_(std::move(hint)), exit_code_(exit_code) {}
  const std::string& hint() const noexcept { return hint_; }
  int exit_code() const noexcept { return exit_code_; }

 private:
  std::string hint_;
  int exit_code_;
};

// Bad CLI value, option or combination.
struct UsageError : Error {
  explicit UsageError(const std::string& what, std::string hint = {}) : Error(what, std::move(hint), kExitUsage) {}
};
// Bad config file or key.
struct ConfigError : Error {
  explicit ConfigError(const std::string& what, std::string hint = {}) : Error(what, std::move(hint), kExitUsage) {}
};
// Missing or corrupt dataset / checkpoint / input file.
struct DataError : Error {
  explicit DataError(const std::string& what, std::string hint = {}) : Error(what, std::move(hint), kExitUsage) {}
};
// Distributed setup or communication failed (peer missing, timeout, collective error).
struct DistError : Error {
  explicit DistError(const std::string& what, std::string hint = {}) : Error(what, std::move(hint), kExitFailed) {}
};
// Something on the machine (library, device, file system) failed at run time.
struct SystemError : Error {
  explicit SystemError(const std::string& what, std::string hint = {}) : Error(what, std::move(hint), kExitFailed) {}
};

// Prints "trainbox: <what>" and, if any, "  fix: <hint>" to stderr; returns the exit code.
int report_error(const Error& e, const char* program = "trainbox");

// Under torchrun / trainbox run: records the error in $TORCHELASTIC_ERROR_FILE (torchrun's
// JSON format) so the launcher's failure summary can show it. No-op when unset.
void write_error_file(const std::string& type, const std::string& message);

// errno text for messages: "Permission denied (errno 13)".
std::string errno_text(int err);

}  // namespace trainbox
