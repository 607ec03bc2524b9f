// trainbox preflight: under a launcher, do the nodes agree, reach the master and allreduce together?
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "validators.h"
#include <trainbox/distributed/preflight.h>
#include <trainbox/train/config.h>
#include <trainbox/train/preflight_model.h>
#include <trainbox/train/process_setup.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

Runner add_preflight(CLI::App& app) {
  auto timeout = std::make_shared<int>(30);
  app.add_option("--timeout", *timeout, "Seconds for each wait (reaching the master, the store, the allreduce)")
      ->check(CLI::Range(1, 3600));
  auto json = std::make_shared<bool>(false);
  auto no_links = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "Rank 0 prints the facts per node, links and verdicts as one JSON object");
  app.add_flag("--no-links", *no_links, "Skip the pairwise bandwidth/latency test between nodes");
  auto link_rate = std::make_shared<double>(0);
  app.add_option("--link-rate", *link_rate,
                 "GB/s every link should reach; a node or link under a fifth of it is named (default: the "
                 "typical node's best link)")
      ->check(positive_number());
  // The job's model: the link finding then says whether gradient compression would help it.
  auto config = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  app.add_option("--config", *config,
                 "The job's trainbox train config: judge the slowest link for its model (one measured step, its "
                 "gradient shapes) and name the dist.grad_compression that would help, or say to leave it off")
      ->check(CLI::ExistingFile);
  app.add_option("--set", *sets, "With --config: override a key, as trainbox train --set (repeatable)");
  return [timeout, json, no_links, link_rate, config, sets] {
    dist::PreflightOptions o;
    std::optional<train::Config> model_cfg;  // checked before anything starts: a bad config is exit 2, alone
    if (!config->empty() || !sets->empty()) {
      if (config->empty()) throw UsageError("--set applies to --config only", "add --config FILE, or drop --set");
      train::Config cfg = train::load_config(*config);
      for (const auto& s : *sets) train::apply_override(cfg, s);
      model_cfg = cfg;
    }
    o.timeout = std::chrono::seconds(*timeout);
    o.json = *json;
    o.links = !*no_links;
    o.expected_link_gbytes_per_s = *link_rate;
    train::configure_process({.keep_large_allocations = false});  // NCCL's settings, as for training
    if (model_cfg) o.model = train::preflight_model(*model_cfg);  // before the process group, on every rank
    return dist::run_preflight(o);
  };
}

}  // namespace trainbox::cli
