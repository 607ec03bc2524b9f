// trainbox/env/render.h — how the doctor shows a report: a sectioned text table, or JSON.
//
//   std::cout << render_text(report, findings, {.color = isatty(1)});
//   std::cout << doctor_json(report, findings).dump(2);
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <trainbox/env/diagnose.h>
#include <trainbox/env/report.h>

namespace trainbox::env {

struct RenderOptions {
  bool color = false;
};

// host, driver, libraries, torch, GPUs, topology, environment — then the findings and a summary line.
std::string render_text(const EnvReport& report, const std::vector<Finding>& findings, const RenderOptions& o = {});
// Only the findings block ("[error] id: message" / "  fix: …") and the summary line.
std::string render_findings(const std::vector<Finding>& findings, const RenderOptions& o = {});

nlohmann::json findings_to_json(const std::vector<Finding>& findings);
// {"report": {...}, "findings": [...], "summary": {"errors": n, "warnings": n, "info": n}}
nlohmann::json doctor_json(const EnvReport& report, const std::vector<Finding>& findings);

}  // namespace trainbox::env
