// trainbox dash — finished or running `trainbox train` runs compared in the browser: their
// curves overlaid, their config.toml differences side by side (docs/dashboard.md). The server,
// its security rules and the page are trainbox run --dashboard's (dashboard/dashboard.h).
//
//   trainbox dash runs/lr-0.1 runs/lr-0.01        (http://127.0.0.1:8265/ until Ctrl-C)
//   trainbox dash runs/ --port 0                  (every run in runs/, any free port)
// No torch: it reads files only.
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include <trainbox/dashboard/dashboard.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

namespace {
struct DashOptions {
  std::vector<std::string> run_dirs;
  std::string addr = "127.0.0.1", port = "8265", token;
};
}  // namespace

Runner add_dash(CLI::App& app) {
  auto o = std::make_shared<DashOptions>();
  app.add_option("RUN_DIR", o->run_dirs,
                 "trainbox train run dirs (metrics.jsonl, config.toml), or folders of them such as runs/")
      ->required();
  app.add_option("--port", o->port, "Port to serve on (0: any free one; the URL is printed)")->capture_default_str();
  app.add_option("--addr", o->addr, "Address to bind (any but loopback needs a token)")->capture_default_str();
  app.add_option(
      "--token", o->token,
      "Token the page asks for (?token= or Authorization: Bearer); env " + std::string(dashboard::kDashboardTokenEnv));
  app.footer("Read-only; serves until Ctrl-C. Runs still training update every second.");
  return [o] {
    const std::string host = o->addr.find(':') != std::string::npos ? "[" + o->addr + "]" : o->addr;
    const char* env_token = std::getenv(dashboard::kDashboardTokenEnv);
    dashboard::DashboardConfig cfg = dashboard::resolve_dashboard(
        host + ":" + o->port, o->token, env_token ? env_token : "", dashboard::DashboardServer::kDash);
    std::vector<std::string> dirs = dashboard::expand_run_dirs(o->run_dirs);
    // Blocked before the server's threads start (they inherit the mask): only sigwait sees them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    const std::size_t n = dirs.size();
    auto dash = dashboard::Dashboard::serve_runs(cfg, std::move(dirs));
    std::cout << fmt::format("trainbox dash: {} ({} run{}; Ctrl-C stops)", dash->url(), n, n == 1 ? "" : "s")
              << std::endl;
    int sig = 0;
    sigwait(&stop, &sig);
    return 0;
  };
}

}  // namespace trainbox::cli
