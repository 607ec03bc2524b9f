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
#include <functional>
#include <string>
#include <vector>

#include <trainbox/env/diagnose.h>
#include <trainbox/env/report.h>

namespace trainbox::env {

struct EntrypointPlan {
  std::vector<std::string> banner;   // image and component versions, GPUs
  std::vector<std::string> notices;  // the doctor's errors and warnings, each with its fix
};

// image: what the image says of itself (the trainbox image sets $TRAINBOX_IMAGE to its
// base images); empty outside an image.
EntrypointPlan plan_entrypoint(const EnvReport& report, const std::vector<Finding>& findings,
                               const std::string& image = {});

// The image's shorthand, `docker run trainbox doctor`: a first word that is one of
// trainbox's commands (util/commands.h, the list the CLI dispatches on; all but `entrypoint`)
// and no program on PATH runs as `<trainbox> word …`; anything else (bash, python, a path)
// runs as given. on_path(word): is there such a program.
bool is_entrypoint_shorthand(const std::string& word);
std::vector<std::string> resolve_entrypoint_command(std::vector<std::string> command, const std::string& trainbox_exe,
                                                    const std::function<bool(const std::string&)>& on_path);

}  // namespace trainbox::env
