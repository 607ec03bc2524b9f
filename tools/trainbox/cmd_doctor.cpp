// trainbox doctor — probe → EnvReport → diagnose → findings, as text or JSON.
#include <unistd.h>

#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "json_result.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/env/probe.h>
#include <trainbox/env/render.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/process.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>

namespace trainbox::cli {

namespace {
struct DoctorOptions {
  bool json = false, strict = false, smoke = false, no_color = false;
  std::vector<std::string> library_path;
  std::string torch_dir, from;
};

int run_doctor(const DoctorOptions& o) {
  env::EnvReport report;
  if (!o.from.empty()) {
    report = env::read_report_file(o.from);
  } else {
    env::ProbeOptions po;
    po.library_path = o.library_path;
    po.library_path_only = !o.library_path.empty();
    po.torch_dir = o.torch_dir;
    report = env::probe(po);
  }
  auto findings = env::diagnose(report);
  int rc = env::exit_code(findings, o.strict);

  // --- smoke: real work on the device, in the torch-linked helper ---
  nlohmann::json smoke;
  if (o.smoke) {
    std::string tool = find_sibling_program("trainbox-torch");
    if (tool.empty())
      throw UsageError("--smoke needs trainbox-torch next to trainbox", "build with -DTRAINBOX_WITH_TORCH=ON");
    // The result comes through a file (util/result_file.h): its stdout may carry library
    // chatter (NCCL_DEBUG=INFO prints there), so it is captured and dropped, never parsed.
    auto res = run_for_result({tool, "smoke", "--json"});
    smoke = nlohmann::json::parse(res.result, nullptr, false);
    if (smoke.is_discarded())
      smoke = {{"ok", false},
               {"error", "trainbox-torch smoke exited " + std::to_string(res.exit_code) + " without a result"}};
    if (res.exit_code != 0) rc = kExitFailed;
  }

  if (o.json) {
    auto j = env::doctor_json(report, findings);
    if (o.smoke) j["smoke"] = smoke;
    j["exit_code"] = rc;
    print_json_result(j);  // one document, rank 0's, under a launcher too
  } else {
    env::RenderOptions ro;
    ro.color = !o.no_color && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
    std::cout << env::render_text(report, findings, ro);
    if (o.smoke) {
      std::cout << "\nSmoke test (" << smoke.value("device", std::string("?")) << ")\n";
      for (const auto& c : smoke.value("checks", nlohmann::json::array()))
        std::cout << fmt::format("  {}  {:<10} {:>9.2f} ms  {}\n", c.value("ok", false) ? "pass" : "FAIL",
                                 c.value("name", std::string()), c.value("ms", 0.0), c.value("detail", std::string()));
      if (smoke.contains("note")) std::cout << "  note: " << smoke["note"].get<std::string>() << "\n";
      if (smoke.contains("error")) std::cout << "  error: " << smoke["error"].get<std::string>() << "\n";
    }
  }
  return rc;
}
}  // namespace

Runner add_doctor(CLI::App& app) {
  auto o = std::make_shared<DoctorOptions>();
  app.add_flag("--json", o->json, "Print the report and findings as JSON");
  app.add_flag("--strict", o->strict, "Exit 1 on warnings too");
  app.add_flag("--smoke", o->smoke,
               "Also run real work: allocation, GEMM checked against the CPU, H2D/D2H copy, single-rank allreduce");
  app.add_flag("--no-color", o->no_color, "Plain text even on a terminal");
  app.add_option("--library-path", o->library_path,
                 "Look for the GPU libraries only in these directories (repeatable; for testing a layout)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--torch-dir", o->torch_dir, "torch package or LibTorch directory to describe")
      ->check(CLI::ExistingDirectory);
  app.add_option("--from", o->from, "Diagnose a saved report (from `doctor --json`) instead of this machine")
      ->check(CLI::ExistingFile);
  return [o] { return run_doctor(*o); };
}

}  // namespace trainbox::cli
