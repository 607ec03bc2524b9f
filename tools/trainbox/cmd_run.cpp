// trainbox run — torchrun's options in, RunConfig out, then the launcher (no torch linked).
//
//   trainbox run --nproc-per-node 4 -- trainbox train cfg.toml
//   trainbox run --standalone --nproc-per-node 2 python3 train.py --lr 0.1   (no -- needed)
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "train_args.h"
#include <trainbox/launch/launcher.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

namespace {
struct RunOptions {
  // Text as typed: resolve_run_config() parses, falls back to PET_*/Slurm/Kubeflow, validates.
  std::vector<std::pair<CLI::Option*, std::optional<std::string> launch::RunArgs::*>> texts;
  std::deque<std::string> values;  // deque: options keep references to these
  bool standalone = false, no_prefix = false, no_python = false, module = false, no_instrument = false;
  std::string command_placeholder;
};
}  // namespace

Runner add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto text = [&](const std::string& names, std::optional<std::string> launch::RunArgs::*field,
                  const std::string& help) {
    o->values.emplace_back();
    o->texts.emplace_back(app.add_option(names, o->values.back(), help), field);
  };
  using A = launch::RunArgs;
  text("-n,--nproc-per-node,--nproc_per_node", &A::nproc_per_node,
       "Workers on this node: a count, gpu, cpu or auto (default 1; env PET_NPROC_PER_NODE)");
  text("--nnodes", &A::nnodes, "Number of nodes, N or N:N (default 1; env PET_NNODES, Slurm, Kubeflow)");
  text("--node-rank,--node_rank", &A::node_rank, "This node's rank, 0..nnodes-1 (default 0; env PET_NODE_RANK)");
  text("--master-addr,--master_addr", &A::master_addr,
       "Host of node rank 0, where rank 0 hosts the c10d store (default 127.0.0.1)");
  text("--master-port,--master_port", &A::master_port, "Port of that store (default 29500)");
  text("--max-restarts,--max_restarts", &A::max_restarts,
       "Restart all workers up to N times after a failure (default 0)");
  text("--log-dir,--log_dir", &A::log_dir,
       "Write DIR/attempt_<n>/<rank>/{stdout,stderr}.log and error.json (default: a temporary folder for error files)");
  text("-r,--redirects", &A::redirects,
       "Send streams to the log files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:3,1:2");
  text("-t,--tee", &A::tee, "Send streams to the console and the log files (same values as --redirects)");
  text("--local-ranks-filter,--local_ranks_filter", &A::local_ranks_filter,
       "Show only these local ranks on the console, e.g. 0,2 (log files get every rank)");
  text("--run-id,--run_id,--rdzv-id,--rdzv_id", &A::run_id,
       "Job id: TORCHELASTIC_RUN_ID for the workers; with c10d, every node must pass the same (default none)");
  text("--rdzv-backend,--rdzv_backend", &A::rdzv_backend,
       "static (each node passes --node-rank; the default) or c10d (nodes meet at --rdzv-endpoint, which picks "
       "node ranks and the master, fails and restarts all nodes together)");
  text("--rdzv-endpoint,--rdzv_endpoint", &A::rdzv_endpoint,
       "HOST[:PORT] of the c10d rendezvous (port 29400); the launcher on HOST hosts it and becomes node rank 0");
  text("--rdzv-conf,--rdzv_conf", &A::rdzv_conf,
       "c10d settings: join_timeout=600,read_timeout=60,heartbeat_interval=1,heartbeat_timeout=5 (seconds), "
       "is_host=1|0");
  text("--monitor-interval,--monitor_interval", &A::monitor_interval,
       "Accepted for torchrun compatibility (trainbox run reacts to worker exits at once)");
  text("--local-addr,--local_addr", &A::local_addr,
       "This node's address as the other nodes reach it (c10d; default: the address it reaches the endpoint from)");
  text("--grace-period,--grace_period", &A::grace_period,
       "Seconds between SIGTERM and SIGKILL when stopping workers (default 30)");
  text("--stall-timeout,--stall_timeout", &A::stall_timeout,
       "Seconds without progress after which a worker that reports heartbeats is stalled (default 180; 0 = off; "
       "workers that never report are never judged)");
  text("--on-stall,--on_stall", &A::on_stall,
       "On a stall: dump (stacks, keep running), kill (stacks, stop, exit 124; the default) or restart (under "
       "--max-restarts)");
  text("--stack-timeout,--stack_timeout", &A::stack_timeout,
       "Seconds each stack tool (eu-stack, py-spy) gets per worker before it is abandoned (default 10)");
  text("--dashboard", &A::dashboard,
       "Serve a live page of the job, /metrics (Prometheus) and /api/state at [ADDR:]PORT (default address "
       "127.0.0.1; any other needs a token; docs/dashboard.md)");
  text("--dashboard-token", &A::dashboard_token,
       "Token the dashboard asks for (?token= or Authorization: Bearer); env TRAINBOX_DASHBOARD_TOKEN");
  text("--dashboard-run-dir", &A::dashboard_run_dir,
       "Where rank 0 writes metrics.jsonl, for the curves (default: the command's --run-dir, else the newest "
       "./runs/*)");
  app.add_flag("--standalone", o->standalone, "One node on 127.0.0.1 with a free port (no --master-* needed)");
  app.add_flag("--no-prefix,--no_prefix", o->no_prefix, "Do not prefix console lines with [rank N]");
  app.add_flag("--no-python,--no_python", o->no_python,
               "Run the command as given, even a .py script (default: a first word ending in .py runs through "
               "$TRAINBOX_PYTHON, else python3 on PATH, else the python3 next to trainbox)");
  app.add_flag("-m,--module", o->module, "The command is a Python module: run `python -m MODULE ARGS…`");
  app.add_flag("--no-instrument,--no_instrument", o->no_instrument,
               "Do not report a Python worker's phases (data, forward, backward, allreduce, optimizer, "
               "checkpoint) as heartbeats (default: reported, without a line of the script changed)");
  // The command is everything from the first positional (or after --) on, options included:
  // prefix_command() hands it over untouched. The always-rejecting positional below only
  // exists so that "--" is accepted here rather than passed to the parent app.
  app.add_option("COMMAND", o->command_placeholder, "The program to run and its arguments, after --")
      ->check(CLI::Validator([](std::string&) { return std::string("taken by prefix_command"); }, "", ""));
  app.validate_positionals();
  app.prefix_command();
  app.footer(
      "Workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, "
      "TORCHELASTIC_*).\nExit code: the first failing worker's (128+signal if killed) on every node, 0 when all "
      "succeed, 2 for bad options or a failed rendezvous, 125 when a node of a c10d job is lost.");

  CLI::App* self = &app;
  return [o, self] {
    launch::RunArgs args;
    for (std::size_t i = 0; i < o->texts.size(); ++i)
      if (o->texts[i].first->count() > 0) args.*(o->texts[i].second) = o->values[i];
    args.standalone = o->standalone;
    args.no_prefix = o->no_prefix;
    args.no_python = o->no_python;
    args.module = o->module;
    args.no_instrument = o->no_instrument;
    std::vector<std::string> rest = self->remaining();
    if (!rest.empty() && rest.front() != "--" && rest.front().size() > 1 && rest.front()[0] == '-')
      throw UsageError("unknown option " + rest.front(),
                       "see `trainbox run --help`; put the command after --, e.g. trainbox run -- python3 train.py");
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    args.command = std::move(rest);
    args.worker_keys = train_worker_keys;  // a `trainbox train` worker: its config's keys in the job digest
    return launch::launch(launch::resolve_run_config(args));
  };
}

}  // namespace trainbox::cli
