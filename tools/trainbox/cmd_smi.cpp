// trainbox smi — one row per GPU from NVML; --watch refreshes in place; --json.
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "json_result.h"
#include <trainbox/env/nvml.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/table.h>
#include <trainbox/util/clock.h>

namespace trainbox::cli {

namespace {
struct SmiOptions {
  bool json = false;
  double watch = 0;
  int count = 0;
  std::vector<std::string> library_path;
};

volatile std::sig_atomic_t g_stop = 0;

std::string render(const env::Nvml& nvml, const std::vector<env::GpuInfo>& gpus) {
  std::string out = fmt::format("driver {}  CUDA {}  {} GPU{}\n", nvml.driver_version(),
                                nvml.cuda_driver_version() > 0 ? fmt::format("{}.{}", nvml.cuda_driver_version() / 1000,
                                                                             (nvml.cuda_driver_version() % 1000) / 10)
                                                               : "-",
                                gpus.size(), gpus.size() == 1 ? "" : "s");
  Table t({"#", "name", "memory used/total", "util", "temp", "power/limit", "processes"},
          {true, false, true, true, true, true, false});
  for (const auto& g : gpus) {
    std::string procs;
    for (const auto& p : g.processes)
      procs += fmt::format("{}{}:{}{}", procs.empty() ? "" : " ", p.pid,
                           p.name.empty() ? "?" : p.name.substr(p.name.rfind('/') + 1),
                           p.used_bytes < 0 ? "" : "(" + human_bytes(p.used_bytes) + ")");
    t.add_row({std::to_string(g.index), g.name,
               g.mem_total_bytes < 0
                   ? "-"
                   : fmt::format("{} / {}", human_bytes(g.mem_used_bytes), human_bytes(g.mem_total_bytes)),
               g.util_gpu_pct < 0 ? "-" : fmt::format("{}%", g.util_gpu_pct),
               g.temperature_c < 0 ? "-" : fmt::format("{}C", g.temperature_c),
               g.power_w < 0 ? "-" : fmt::format("{:.0f}/{:.0f} W", g.power_w, g.power_limit_w),
               procs.empty() ? "-" : procs});
  }
  return out + t.render();
}

int run_smi(const SmiOptions& o) {
  env::Nvml nvml = env::Nvml::open(o.library_path, o.library_path.empty());
  if (!nvml)
    throw SystemError(
        "NVML is not available: " + nvml.error(),
        "smi needs the NVIDIA driver (libnvidia-ml.so.1); run `trainbox doctor` to see why it is missing");
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  const bool tty = isatty(STDOUT_FILENO);
  for (int i = 0; !g_stop; ++i) {
    auto gpus = nvml.gpus(true);
    if (o.json) {
      if (o.watch > 0)  // a stream of documents, one line each, not a result
        std::cout << env::gpus_to_json(gpus).dump(-1) << std::endl;
      else
        print_json_result(env::gpus_to_json(gpus));  // one document, rank 0's, under a launcher too
    } else {
      if (o.watch > 0 && tty) std::cout << "\033[H\033[2J";  // home + clear: refresh in place
      std::cout << render(nvml, gpus) << std::flush;
    }
    if (o.watch <= 0 || (o.count > 0 && i + 1 >= o.count)) break;
    auto until = std::chrono::steady_clock::now() + seconds(o.watch);
    while (!g_stop && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return kExitOk;
}
}  // namespace

Runner add_smi(CLI::App& app) {
  auto o = std::make_shared<SmiOptions>();
  app.add_flag("--json", o->json, "JSON (one array per refresh with --watch)");
  app.add_option("--watch", o->watch, "Refresh every SECONDS until interrupted")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--count", o->count, "With --watch: stop after N refreshes")->check(CLI::PositiveNumber);
  app.add_option("--library-path", o->library_path, "Look for libnvidia-ml.so.1 only in these directories")
      ->check(CLI::ExistingDirectory);
  return [o] { return run_smi(*o); };
}

}  // namespace trainbox::cli
