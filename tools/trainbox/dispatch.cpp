// One parse-and-run for both CLI programs: see dispatch.h.
#include "dispatch.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include <trainbox/util/errors.h>
#include <trainbox/util/fatal_origin.h>
#include <trainbox/util/worker_error.h>

namespace trainbox::cli {

namespace {

// The exception being handled, as the exit code and the one line main() prints.
int report_current_exception(bool error_file) {
  try {
    throw;
  } catch (const Error& e) {
    return report_worker_error(e, error_file);  // under trainbox run a usage error is said once, by it
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));  // c10 errors append a C++ backtrace
    if (error_file) write_error_file("std::exception", what);
    std::fprintf(stderr, "%s%s\n", fatal_line_start("trainbox", "internal error").c_str(), what.c_str());
    return kExitFailed;
  } catch (...) {  // not a std::exception: still one line, never std::terminate
    if (error_file) write_error_file("unknown", "an exception that is not a std::exception");
    std::fprintf(stderr, "%san exception that is not a std::exception\n",
                 fatal_line_start("trainbox", "internal error").c_str());
    return kExitFailed;
  }
}

}  // namespace

Runners add_commands(CLI::App& app, std::initializer_list<CommandEntry> commands, bool torch_program) {
  Runners runners;
  for (const auto& c : commands) {
    CLI::App* sub = add_command(app, c.name, torch_program);  // std::logic_error for a name not listed
    runners[sub] = c.add(*sub);
  }
  // ... and the other way round: a listed command this program lacks would be dispatched nowhere
  for (const auto& c : kCommands)
    if (c.needs_torch == torch_program &&
        std::none_of(runners.begin(), runners.end(), [&](const auto& r) { return r.first->get_name() == c.name; }))
      throw std::logic_error(std::string("command '") + c.name + "' is listed for this program in " +
                             "trainbox/util/commands.h but not registered by its main()");
  return runners;
}

int run_cli(CLI::App& app, const Runners& runners, int argc, char** argv, const CliOptions& o) {
  // --- before the parse: `train --nproc-per-node N` relaunches under `trainbox run` ---
  if (o.before_parse) {
    try {
      if (const int rc = o.before_parse(argc, argv); rc >= 0) return rc;
    } catch (...) {  // a bad config or value: one line, before any worker starts (a worker's: its error file)
      return report_current_exception(o.error_file);
    }
  }
  // --- the parse: help and version are answers, anything else CLI11 rejects is exit 2 ---
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string cmd = app.get_subcommands().empty() ? "" : " " + app.get_subcommands().front()->get_name();
    return report_worker_error(UsageError(e.what(), "see `trainbox" + cmd + " --help`"), o.error_file);
  }
  // --- the command ---
  try {
    for (auto* sub : app.get_subcommands()) return runners.at(sub)();
  } catch (...) {
    return report_current_exception(o.error_file);
  }
  return kExitUsage;
}

}  // namespace trainbox::cli
