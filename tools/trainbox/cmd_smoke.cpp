// trainbox smoke: real work on the device (doctor --smoke runs it).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "json_result.h"
#include <trainbox/env/torch/smoke.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/result_file.h>

namespace trainbox::cli {

Runner add_smoke(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("auto");
  app.add_flag("--json", *json, "JSON output");
  app.add_option("--device", *device, "auto, cpu, cuda or cuda:N");
  return [json, device] {
    auto r = env::run_smoke(*device);
    if (*json) {
      // doctor --smoke reads it from TRAINBOX_RESULT_FILE (NCCL_DEBUG lines on stdout can't break
      // it), on whichever rank the doctor runs (json_result.h).
      print_json_result(env::smoke_to_json(r));
    } else {
      std::printf("smoke test on %s (start-up %.1f ms, not counted below)\n", r.device.c_str(), r.startup_ms);
      for (const auto& c : r.checks)
        std::printf("  %s  %-9s %8.2f ms  %s\n", c.ok ? "pass" : "FAIL", c.name.c_str(), c.ms, c.detail.c_str());
      if (!r.note.empty()) std::cout << "  note: " << r.note << "\n";
    }
    return r.ok() ? kExitOk : kExitFailed;
  };
}

}  // namespace trainbox::cli
