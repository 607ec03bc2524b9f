// trainbox entrypoint [--from REPORT.json] -- CMD…: the container start-up check. Prints a
// banner and the doctor's errors and warnings, then execs CMD (its exit code is the
// container's). Never blocks start-up on a finding.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "commands.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/env/entrypoint.h>
#include <trainbox/env/probe.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/process.h>
#include <trainbox/util/strings.h>

namespace trainbox::cli {

namespace {
constexpr double kDefaultTimeoutS = 30;

struct EntrypointArgs {
  std::string from;
  bool quiet = false;
  std::string timeout = "30";  // seconds; text, so that a bad value warns instead of stopping start-up
  std::vector<std::string> command;
};

// The banner and notices, as text (runs in a child: see run_entrypoint).
std::string check_text(const EntrypointArgs& a) {
  env::EnvReport r;
  if (!a.from.empty()) {
    r = env::read_report_file(a.from);
  } else {
    env::ProbeOptions po;
    po.gpu_processes = false;
    r = env::probe(po);
  }
  const char* image = std::getenv("TRAINBOX_IMAGE");
  auto plan = env::plan_entrypoint(r, env::diagnose(r), image ? image : "");
  std::string out;
  for (const auto& l : plan.banner) out += l + "\n";
  for (const auto& n : plan.notices) out += n + "\n";
  return out;
}

int run_entrypoint(const EntrypointArgs& a) {
  if (a.command.empty()) throw UsageError("entrypoint needs a command to run", "e.g. trainbox entrypoint -- bash");
  // A bad timeout is a warning, not an error: the container must start whatever its variables say.
  double timeout_s = parse_real(a.timeout).value_or(-1);
  if (!(timeout_s >= 0 && timeout_s < 1e6)) {
    timeout_s = kDefaultTimeoutS;
    std::fprintf(stderr,
                 "trainbox entrypoint: ignoring timeout '%s' (--timeout / TRAINBOX_ENTRYPOINT_TIMEOUT): not a number "
                 "of seconds; using %g (0 skips the check)\n",
                 a.timeout.c_str(), kDefaultTimeoutS);
  }
  if (!a.quiet && timeout_s > 0) {
    // A failing check must never stop the container from starting, and neither may a hung
    // one: the probe runs in a child with a deadline (cuInit and NVML can hang on a GPU
    // that fell off the bus).
    auto res = run_in_child([&] { return check_text(a); }, static_cast<int>(timeout_s * 1000));
    if (res.timed_out)
      std::fprintf(stderr,
                   "trainbox entrypoint: start-up check skipped: it took more than %g s (a hung GPU or driver? see "
                   "nvidia-smi and dmesg; TRAINBOX_ENTRYPOINT_TIMEOUT raises the limit)\n",
                   timeout_s);
    else if (res.exit_code != 0)
      std::fprintf(
          stderr, "trainbox entrypoint: start-up check skipped: %s\n",
          res.out.empty() ? ("the check ended with code " + std::to_string(res.exit_code)).c_str() : res.out.c_str());
    else
      std::fputs(res.out.c_str(), stderr);
  }
  std::fflush(stderr);
  const std::string dir = self_exe_dir();  // "" without /proc: then trainbox from PATH
  const auto command = env::resolve_entrypoint_command(a.command, dir.empty() ? "trainbox" : dir + "/trainbox",
                                                       [](const std::string& w) { return !find_on_path(w).empty(); });
  std::vector<char*> argv;
  for (const auto& s : command) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  int err = errno;
  std::fprintf(stderr, "trainbox entrypoint: cannot run %s: %s\n", command[0].c_str(), errno_text(err).c_str());
  return err == ENOENT ? 127 : 126;  // the shell's codes for "not found" and "not executable"
}
}  // namespace

Runner add_entrypoint(CLI::App& app) {
  auto a = std::make_shared<EntrypointArgs>();
  app.add_option("--from", a->from, "Use a saved report (doctor --json) instead of probing (tests)");
  app.add_flag("--quiet", a->quiet, "Skip the banner and the check")->envname("TRAINBOX_ENTRYPOINT_QUIET");
  app.add_option("--timeout", a->timeout,
                 "Give up the check after this many seconds and start anyway (default 30; 0 skips it)")
      ->envname("TRAINBOX_ENTRYPOINT_TIMEOUT");
  app.add_option("command", a->command, "The command to run, after --")->expected(-1);
  app.prefix_command();
  return [a] { return run_entrypoint(*a); };
}

}  // namespace trainbox::cli
