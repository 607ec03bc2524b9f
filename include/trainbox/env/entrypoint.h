// trainbox/env/entrypoint.h — what a container prints before it runs the user's command.
//
// NGC's PyTorch images check the driver, compatibility mode and /dev/shm in shell scripts
// at start-up; the trainbox image's entrypoint (`trainbox entrypoint -- CMD…`) uses the
// doctor's probe instead. plan_entrypoint() is pure: from a report it decides the banner
// and the notices; it never decides to stop — start-up is never blocked on a warning.
//
//   EntrypointPlan p = plan_entrypoint(probe(), diagnose(report));
//   for (auto& l : p.banner) puts(l.c_str());  for (auto& n : p.notices) puts(n.c_str());
#pragma once
#include <string>
#include <vector>

#include <trainbox/env/diagnose.h>
#include <trainbox/env/report.h>

namespace trainbox::env {

struct EntrypointPlan {
  std::vector<std::string> banner;   // image and component versions, GPUs
  std::vector<std::string> notices;  // the doctor's errors and warnings, each with its fix
};

EntrypointPlan plan_entrypoint(const EnvReport& report, const std::vector<Finding>& findings);

}  // namespace trainbox::env
