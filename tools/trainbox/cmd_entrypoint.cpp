// trainbox entrypoint [--from REPORT.json] -- CMD…: the container start-up check. Prints a
// banner and the doctor's errors and warnings, then execs CMD (its exit code is the
// container's). Never blocks start-up on a finding.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/env/entrypoint.h>
#include <trainbox/env/probe.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/process.h>
#include <trainbox/util/strings.h>

namespace trainbox::cli {

namespace {
struct EntrypointArgs {
  std::string from;
  bool quiet = false;
  std::vector<std::string> command;
};

int run_entrypoint(const EntrypointArgs& a) {
  if (a.command.empty()) throw UsageError("entrypoint needs a command to run", "e.g. trainbox entrypoint -- bash");
  if (!a.quiet) {
    try {  // a failing check must never stop the container from starting
      env::EnvReport r;
      if (!a.from.empty()) {
        auto t = read_file(a.from);
        if (!t) throw DataError("cannot read " + a.from);
        auto j = nlohmann::json::parse(*t, nullptr, false);
        r = env::report_from_json(j.is_object() && j.contains("report") ? j["report"].dump() : *t);
      } else {
        env::ProbeOptions po;
        po.gpu_processes = false;
        r = env::probe(po);
      }
      const char* image = std::getenv("TRAINBOX_IMAGE");
      auto plan = env::plan_entrypoint(r, env::diagnose(r), image ? image : "");
      for (const auto& l : plan.banner) std::fprintf(stderr, "%s\n", l.c_str());
      for (const auto& n : plan.notices) std::fprintf(stderr, "%s\n", n.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainbox entrypoint: start-up check skipped: %s\n", e.what());
    }
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
  app.add_flag("--quiet", a->quiet, "Skip the banner and the check");
  app.add_option("command", a->command, "The command to run, after --")->expected(-1);
  app.prefix_command();
  return [a] { return run_entrypoint(*a); };
}

}  // namespace trainbox::cli
