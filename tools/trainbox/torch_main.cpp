// trainbox-torch — the LibTorch-linked half of the trainbox CLI (train, export, sample, bench,
// smoke). Users run it through `trainbox <command>`, which execs this program.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include <trainbox/dist/preflight.h>
#include <trainbox/env/smoke.h>
#include <trainbox/train/process_setup.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/result_file.h>

int main(int argc, char** argv) {
  // `trainbox train --nproc-per-node N …` relaunches itself under `trainbox run`.
  try {
    if (int rc = trainbox::cli::maybe_launch_self(argc, argv); rc >= 0) return rc;
  } catch (const trainbox::Error& e) {  // a bad config or value: one line, before any worker starts
    return trainbox::report_error(e);
  }
  CLI::App app{"trainbox (LibTorch commands)"};
  app.name("trainbox");
  app.require_subcommand(1);
  std::map<CLI::App*, std::function<int()>> runners;

  // --- smoke ---
  {
    auto* sub = trainbox::cli::add_command(app, "smoke", /*torch_program=*/true);
    auto json = std::make_shared<bool>(false);
    auto device = std::make_shared<std::string>("auto");
    sub->add_flag("--json", *json, "JSON output");
    sub->add_option("--device", *device, "auto, cpu, cuda or cuda:N");
    runners[sub] = [json, device] {
      auto r = trainbox::env::run_smoke(*device);
      if (*json) {
        // doctor --smoke reads it from TRAINBOX_RESULT_FILE: NCCL_DEBUG lines on stdout can't break it
        trainbox::write_result(trainbox::env::smoke_to_json(r), 0);
      } else {
        std::printf("smoke test on %s (start-up %.1f ms, not counted below)\n", r.device.c_str(), r.startup_ms);
        for (const auto& c : r.checks)
          std::printf("  %s  %-9s %8.2f ms  %s\n", c.ok ? "pass" : "FAIL", c.name.c_str(), c.ms, c.detail.c_str());
        if (!r.note.empty()) std::cout << "  note: " << r.note << "\n";
      }
      return r.ok() ? trainbox::kExitOk : trainbox::kExitFailed;
    };
  }

  // --- preflight ---
  {
    auto* sub = trainbox::cli::add_command(app, "preflight", /*torch_program=*/true);
    auto timeout = std::make_shared<int>(30);
    sub->add_option("--timeout", *timeout, "Seconds for each wait (reaching the master, the store, the allreduce)")
        ->check(CLI::Range(1, 3600));
    auto json = std::make_shared<bool>(false);
    auto no_links = std::make_shared<bool>(false);
    sub->add_flag("--json", *json, "Rank 0 prints the facts per node, links and verdicts as one JSON object");
    sub->add_flag("--no-links", *no_links, "Skip the pairwise bandwidth/latency test between nodes");
    runners[sub] = [timeout, json, no_links] {
      trainbox::dist::PreflightOptions o;
      o.timeout = std::chrono::seconds(*timeout);
      o.json = *json;
      o.links = !*no_links;
      trainbox::train::configure_process({.keep_large_allocations = false});  // NCCL's settings, as for training
      return trainbox::dist::run_preflight(o);
    };
  }

  auto add = [&](const char* name, auto adder) {
    CLI::App* sub = trainbox::cli::add_command(app, name, /*torch_program=*/true);
    runners[sub] = adder(*sub);
  };
  add("train", trainbox::cli::add_train);
  add("export", trainbox::cli::add_export);
  add("sample", trainbox::cli::add_sample);
  add("bench", trainbox::cli::add_bench);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string cmd = app.get_subcommands().empty() ? "" : " " + app.get_subcommands().front()->get_name();
    return trainbox::report_error(trainbox::UsageError(e.what(), "see `trainbox" + cmd + " --help`"));
  }
  try {
    for (auto* sub : app.get_subcommands()) return runners.at(sub)();
  } catch (const trainbox::Error& e) {
    trainbox::write_error_file("trainbox.Error",
                               std::string(e.what()) + (e.hint().empty() ? "" : " (fix: " + e.hint() + ")"));
    return trainbox::report_error(e);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));  // c10 errors append a C++ backtrace
    trainbox::write_error_file("std::exception", what);
    std::fprintf(stderr, "trainbox: internal error: %s\n", what.c_str());
    return trainbox::kExitFailed;
  }
  return trainbox::kExitUsage;
}
