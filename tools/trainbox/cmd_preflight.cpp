// trainbox preflight: under a launcher, do the nodes agree, reach the master and allreduce together?
#include <chrono>
#include <memory>

#include "commands.h"
#include "validators.h"
#include <trainbox/distributed/preflight.h>
#include <trainbox/train/process_setup.h>

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
  return [timeout, json, no_links, link_rate] {
    dist::PreflightOptions o;
    o.timeout = std::chrono::seconds(*timeout);
    o.json = *json;
    o.links = !*no_links;
    o.expected_link_gbytes_per_s = *link_rate;
    train::configure_process({.keep_large_allocations = false});  // NCCL's settings, as for training
    return dist::run_preflight(o);
  };
}

}  // namespace trainbox::cli
