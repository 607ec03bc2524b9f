// `trainbox run`'s option table (launch::run_options()): the docs are generated from it, the
// torchrun spellings and PET_* names are kept, and every default it shows is the one you get.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <trainbox/distributed/worker_env.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/strings.h>

#include "fixtures.h"

using namespace trainbox;
using namespace trainbox::launch;

namespace {
const RunOption* find_option(std::string_view spelling) {
  for (const auto& o : run_options())
    for (const auto& n : split(o.names, ','))
      if (n == spelling) return &o;
  return nullptr;
}

RunArgs with_command(RunArgs a = {}) {
  a.command = {"true"};
  a.set("--no-instrument");
  return a;
}

// What a resolved config means to the job: the workers' variables and every setting the
// launcher acts on.
std::string summary(const RunConfig& c) {
  std::string out;
  for (const auto& [k, v] : worker_env(c, 0, 0, map_env({}))) out += k + "=" + v + "\n";
  out += fmt::format("nproc {} nnodes {} {}..{} backend {} endpoint {}:{} restarts {} log_dir '{}' {}\n",
                     c.nproc_per_node, c.nnodes, c.nnodes_min, c.nnodes_max, c.rdzv_backend, c.rdzv.host, c.rdzv.port,
                     c.max_restarts, c.log_dir, c.log_dir_given);
  out += fmt::format("redirects {} {} tee {} {} filter {} grace {} prefix {} monitor {}\n", c.redirects.all,
                     c.redirects.by_local_rank.size(), c.tee.all, c.tee.by_local_rank.size(),
                     c.local_ranks_filter.size(), c.grace_period_s, c.prefix, c.monitor_interval_s);
  out += fmt::format("rdzv {} {} {} {} {} {} '{}' {}\n", c.rdzv.join_timeout_s, c.rdzv.read_timeout_s,
                     c.rdzv.heartbeat_interval_s, c.rdzv.heartbeat_timeout_s, c.rdzv.last_call_s,
                     c.rdzv.admit_backoff_s, c.rdzv.local_addr, c.rdzv.is_host.has_value());
  out += fmt::format("stall {} {} {} dashboard {}:{} notes {}\n", c.stall_timeout_s, stall_action_name(c.on_stall),
                     c.stack_timeout_s, c.dashboard.addr, c.dashboard.port, c.notes.size());
  return out;
}
}  // namespace

TEST(RunOptions, DocsTableIsGenerated) {
  const auto doc = read_file(test::source_dir() + "/docs/distributed.md");
  ASSERT_TRUE(doc.has_value());
  const std::string begin = "<!-- begin: trainbox run --help-markdown -->\n";
  const std::string end = "<!-- end: trainbox run --help-markdown -->";
  const auto from = doc->find(begin), to = doc->find(end);
  ASSERT_NE(from, std::string::npos) << "docs/distributed.md lacks the line " << begin;
  ASSERT_NE(to, std::string::npos) << "docs/distributed.md lacks the line " << end;
  ASSERT_LT(from, to);
  const auto doc_rows = split(doc->substr(from + begin.size(), to - from - begin.size()), '\n');
  const auto rows = split(run_options_markdown(), '\n');
  for (std::size_t i = 0; i < std::max(doc_rows.size(), rows.size()); ++i)
    ASSERT_EQ(i < doc_rows.size() ? doc_rows[i] : "(none)", i < rows.size() ? rows[i] : "(none)")
        << "row " << i << " of docs/distributed.md's option table differs from the declarations: regenerate the "
        << "table between the two lines with `trainbox run --help-markdown`";
}

// torch 2.11's `torchrun` parser (torch.distributed.run.get_args_parser()): every spelling of the
// options trainbox run takes, and the variable torchrun's `env` action reads (PET_ + dest).
TEST(RunOptions, TorchrunSpellingsAndVariablesAreKept) {
  const std::map<std::string, std::vector<std::string>> torchrun = {
      {"nnodes", {"--nnodes"}},
      {"nproc_per_node", {"--nproc-per-node", "--nproc_per_node"}},
      {"rdzv_backend", {"--rdzv-backend", "--rdzv_backend"}},
      {"rdzv_endpoint", {"--rdzv-endpoint", "--rdzv_endpoint"}},
      {"rdzv_id", {"--rdzv-id", "--rdzv_id"}},
      {"rdzv_conf", {"--rdzv-conf", "--rdzv_conf"}},
      {"standalone", {"--standalone"}},
      {"max_restarts", {"--max-restarts", "--max_restarts"}},
      {"monitor_interval", {"--monitor-interval", "--monitor_interval"}},
      {"module", {"-m", "--module"}},
      {"no_python", {"--no-python", "--no_python"}},
      {"log_dir", {"--log-dir", "--log_dir"}},
      {"redirects", {"-r", "--redirects"}},
      {"tee", {"-t", "--tee"}},
      {"local_ranks_filter", {"--local-ranks-filter", "--local_ranks_filter"}},
      {"node_rank", {"--node-rank", "--node_rank"}},
      {"master_addr", {"--master-addr", "--master_addr"}},
      {"master_port", {"--master-port", "--master_port"}},
      {"local_addr", {"--local-addr", "--local_addr"}},
      {"role", {"--role"}},
  };
  for (const auto& [dest, spellings] : torchrun) {
    const RunOption* o = find_option(spellings.front());
    ASSERT_NE(o, nullptr) << spellings.front() << " is not a trainbox run option";
    for (const auto& s : spellings) EXPECT_EQ(find_option(s), o) << s << " is not a spelling of " << o->flag();
    std::string pet = "PET_" + dest;
    for (auto& ch : pet) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const auto vars = split(o->env, ',');
    EXPECT_NE(std::find(vars.begin(), vars.end(), pet), vars.end()) << o->flag() << " does not read " << pet;
  }
}

TEST(RunOptions, EveryRowIsOneOptionWithItsOwnNames) {
  std::set<std::string> names;
  for (const auto& o : run_options()) {
    EXPECT_TRUE(starts_with(o.flag(), "--")) << o.names;
    EXPECT_EQ(o.value_hint.empty(), o.toggle) << o.names << ": a value has a hint, a switch none";
    EXPECT_FALSE(o.help.empty()) << o.names;
    for (const auto& n : split(o.names, ',')) EXPECT_TRUE(names.insert(n).second) << n << " is declared twice";
    for (const auto& v : split(o.env, ','))
      EXPECT_TRUE(starts_with(v, "PET_") || starts_with(v, "TRAINBOX_")) << o.flag() << ": " << v;
    // the CLI's text lands under the row's flag, whichever name was typed
    for (const auto& n : split(o.names, ','))
      EXPECT_EQ(RunArgs().set(n, "x").given.count(std::string(o.flag())), 1u) << n;
  }
  EXPECT_THROW(RunArgs().set("--no-such-option", "1"), std::logic_error);
  // --standalone is resolved first: it decides whether a scheduler's layout applies at all.
  EXPECT_EQ(run_options().front().flag(), "--standalone");
}

TEST(RunOptions, TheShownDefaultIsWhatYouGetWithoutTheOption) {
  const std::string without = summary(resolve_run_config(with_command(), map_env({})));
  // Defaults written as words, not as a value the option takes:
  const std::set<std::string_view> prose = {"--rdzv-endpoint"};
  int checked = 0;
  for (const auto& o : run_options()) {
    if (o.toggle || !o.default_of || prose.count(o.flag())) continue;
    RunArgs a = with_command();
    a.set(o.flag(), o.default_text());
    try {
      EXPECT_EQ(summary(resolve_run_config(a, map_env({}))), without) << o.flag() << " " << o.default_text();
      ++checked;
    } catch (const UsageError& e) {
      ADD_FAILURE() << o.flag() << "'s default '" << o.default_text() << "' is refused: " << e.what();
    }
  }
  EXPECT_GE(checked, 15);
  // The port is written once (util/job_env.h): the launcher's default, the workers', the help's.
  EXPECT_EQ(RunConfig{}.master_port, kDefaultMasterPort);
  EXPECT_EQ(dist::WorkerEnv{}.master_port, kDefaultMasterPort);
  EXPECT_EQ(find_option("--master-port")->default_text(), std::to_string(kDefaultMasterPort));
  EXPECT_EQ(find_option("--rdzv-endpoint")->default_text(), fmt::format("port {}", RdzvConfig{}.port));
}

TEST(RunOptions, HelpLineCarriesTheDefaultAndTheSources) {
  EXPECT_TRUE(find_option("-n")->help_text().ends_with(
      " (default 1; env PET_NPROC_PER_NODE; else Slurm: SLURM_NTASKS_PER_NODE)"))
      << find_option("-n")->help_text();
  EXPECT_NE(find_option("--rdzv-id")->help_text().find("env PET_RUN_ID or PET_RDZV_ID"), std::string::npos);
  EXPECT_TRUE(find_option("--standalone")->help_text().ends_with(" (env PET_STANDALONE)"));
  EXPECT_EQ(find_option("--dashboard-run-dir")->help_text(), find_option("--dashboard-run-dir")->help);
}

// --role: torchrun's, added as one row and its handler (and the RunConfig field it sets).
TEST(RunOptions, RoleIsTheWorkersRoleName) {
  auto role_name = [](const RunConfig& c) {
    for (const auto& [k, v] : worker_env(c, 0, 0, map_env({})))
      if (k == "ROLE_NAME") return v;
    return std::string("(unset)");
  };
  EXPECT_EQ(role_name(resolve_run_config(with_command(), map_env({}))), "default");  // torchrun's
  RunArgs a = with_command();
  a.set("--role", "trainer");
  EXPECT_EQ(role_name(resolve_run_config(a, map_env({{"PET_ROLE", "other"}}))), "trainer");  // the CLI wins
  EXPECT_EQ(role_name(resolve_run_config(with_command(), map_env({{"PET_ROLE", " eval "}}))), "eval");
  a.set("--role", " ");
  try {
    resolve_run_config(a, map_env({}));
    ADD_FAILURE() << "an empty role was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("--role"), std::string::npos) << e.what();
  }
}
