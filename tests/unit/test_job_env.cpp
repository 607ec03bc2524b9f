// util/job_env.h: the one parser of Slurm hostlists, task counts, the port formula, integers and
// CUDA_VISIBLE_DEVICES, and both of its users (the launcher's RunConfig, the workers' WorkerEnv)
// agreeing on the same environment. Expected hostlists are what `scontrol show hostnames` prints
// (Slurm 22.05).
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <trainbox/distributed/worker_env.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/job_env.h>

using namespace trainbox;
using Hosts = std::vector<std::string>;

namespace {
std::string usage_error(const std::string& list) {
  try {
    expand_hostlist(list);
  } catch (const UsageError& e) {
    EXPECT_FALSE(e.hint().empty());
    return e.what();
  }
  return {};
}
}  // namespace

TEST(Hostlist, PlainNamesAndTopLevelCommas) {
  EXPECT_EQ(expand_hostlist("a"), Hosts{"a"});
  EXPECT_EQ(expand_hostlist("n1,n2"), (Hosts{"n1", "n2"}));
  EXPECT_EQ(expand_hostlist("node-1.cluster,login"), (Hosts{"node-1.cluster", "login"}));
  EXPECT_EQ(expand_hostlist(""), Hosts{});
  EXPECT_EQ(expand_hostlist("a,,b"), (Hosts{"a", "b"}));
  EXPECT_EQ(expand_hostlist("a b"), (Hosts{"a", "b"}));  // blanks separate too
}

TEST(Hostlist, RangesAndLists) {
  EXPECT_EQ(expand_hostlist("gn[10-12,20]"), (Hosts{"gn10", "gn11", "gn12", "gn20"}));
  EXPECT_EQ(expand_hostlist("gnode[10,20]"), (Hosts{"gnode10", "gnode20"}));
  EXPECT_EQ(expand_hostlist("n[3,1,2]"), (Hosts{"n3", "n1", "n2"}));  // order kept, not sorted
  EXPECT_EQ(expand_hostlist("n[1-1]"), Hosts{"n1"});
  EXPECT_EQ(expand_hostlist("n[5]"), Hosts{"n5"});
  EXPECT_EQ(expand_hostlist("[1-3]"), (Hosts{"1", "2", "3"}));
  EXPECT_EQ(expand_hostlist("n[8-11]"), (Hosts{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand_hostlist("rack1-n[05-07],login1"), (Hosts{"rack1-n05", "rack1-n06", "rack1-n07", "login1"}));
  EXPECT_EQ(expand_hostlist("n[1-2]x"), (Hosts{"n1x", "n2x"}));  // suffix after the brackets
  EXPECT_EQ(expand_hostlist("a[1-2],b[3-4]"), (Hosts{"a1", "a2", "b3", "b4"}));
  EXPECT_EQ(expand_hostlist("n1,n1"), (Hosts{"n1", "n1"}));  // duplicates kept
}

TEST(Hostlist, ZeroPaddingIsKept) {
  EXPECT_EQ(expand_hostlist("n[01-02]"), (Hosts{"n01", "n02"}));
  EXPECT_EQ(expand_hostlist("x[007-009]"), (Hosts{"x007", "x008", "x009"}));
  EXPECT_EQ(expand_hostlist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_hostlist("n[9-10]"), (Hosts{"n9", "n10"}));            // no padding without a leading zero
  EXPECT_EQ(expand_hostlist("n[00-01,5]"), (Hosts{"n00", "n01", "n5"}));  // per range
}

TEST(Hostlist, SeveralBracketGroupsMultiplyLeftSlowest) {
  EXPECT_EQ(expand_hostlist("n[1-2]-ib[3,4]"), (Hosts{"n1-ib3", "n1-ib4", "n2-ib3", "n2-ib4"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[01-03]"), (Hosts{"r1n01", "r1n02", "r1n03", "r2n01", "r2n02", "r2n03"}));
  EXPECT_EQ(expand_hostlist("a[1-2]b[3]c,d"), (Hosts{"a1b3c", "a2b3c", "d"}));
}

TEST(Hostlist, FirstHostAgreesWithTheExpansion) {
  for (const char* list : {"a", "gn[10-12,20]", "x[007-009]", "n1,n2", "gnode[10,20]", "rack1-n[05-07],login1",
                           "n[1-2]-ib[3,4]", "[4-5]", "r[2-3]n[09-10]x"})
    EXPECT_EQ(first_host(list), expand_hostlist(list).front()) << list;
  EXPECT_EQ(first_host("n[1-2]-ib[3,4]"), "n1-ib3");
  EXPECT_EQ(first_host("n[1-999999999]"), "n1");  // without expanding a billion names
}

TEST(Hostlist, BadListsAreUsageErrorsNamingTheList) {
  EXPECT_NE(usage_error("x[1-2").find("'x[1-2'"), std::string::npos);
  EXPECT_NE(usage_error("x1-2]").find("without"), std::string::npos);
  EXPECT_NE(usage_error("x[a-b]").find("'a-b'"), std::string::npos);
  EXPECT_NE(usage_error("x[3-1]").find("goes down"), std::string::npos);
  EXPECT_NE(usage_error("x[1-[2]]"), "");
  EXPECT_NE(usage_error("x[]"), "");
  EXPECT_NE(usage_error("x[1-]"), "");
  EXPECT_NE(usage_error("n[1-2000000]").find("more than"), std::string::npos);
  EXPECT_THROW(first_host(""), UsageError);
  EXPECT_THROW(first_host(","), UsageError);
}

TEST(TasksPerNode, SlurmsCompressedCounts) {
  EXPECT_EQ(expand_tasks_per_node("8"), std::vector<int>{8});
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4,2(x2)"), (std::vector<int>{4, 2, 2}));
  EXPECT_THROW(expand_tasks_per_node("2(3)"), UsageError);
  EXPECT_THROW(expand_tasks_per_node("x"), UsageError);
  EXPECT_THROW(expand_tasks_per_node(""), UsageError);
}

TEST(SlurmPort, TheFormula) {
  EXPECT_EQ(slurm_master_port(0), 10000);
  EXPECT_EQ(slurm_master_port(123456), 10000 + 123456 % 50000);
  EXPECT_EQ(slurm_master_port(49999), 59999);
  EXPECT_EQ(slurm_master_port(50000), 10000);
  EXPECT_EQ(slurm_master_port(987654321), 10000 + 987654321 % 50000);
}

TEST(CudaVisibleDevices, LikeTorchDeviceCount) {
  EXPECT_EQ(visible_device_count(std::nullopt, 4), 4);
  EXPECT_EQ(visible_device_count("", 4), 0);
  EXPECT_EQ(visible_device_count("1,0", 4), 2);
  EXPECT_EQ(visible_device_count(" 2 , 3 ", 4), 2);
  EXPECT_EQ(visible_device_count("0,7,1", 4), 1);  // stops at an index past the end
  EXPECT_EQ(visible_device_count("-1", 4), 0);
  EXPECT_EQ(visible_device_count("1,-1,2", 4), 1);
  EXPECT_EQ(visible_device_count("0,0", 4), 0);  // a repeated device: CUDA sees none
  EXPECT_EQ(visible_device_count("GPU-aaa,GPU-bbb", 4), 2);
  EXPECT_EQ(visible_device_count("MIG-aaa", 1), 1);
  EXPECT_EQ(visible_device_count("GPU-aaa,1", 4), 1);  // a list is one kind
  EXPECT_EQ(visible_device_count("0,1,2,3,4,5", 2), 2);
  EXPECT_EQ(visible_device_count("0", 0), 0);
}

// The bug this module ended: the launcher and the workers must read one environment alike.
TEST(JobEnv, LauncherAndWorkersAgreeOnSlurm) {
  std::map<std::string, std::string> vars = {{"SLURM_JOB_ID", "4242"},
                                             {"SLURM_JOB_NODELIST", "n[1-2]-ib[3,4]"},
                                             {"SLURM_NNODES", "4"},
                                             {"SLURM_NODEID", "1"},
                                             {"SLURM_NTASKS_PER_NODE", "2"},
                                             {"SLURM_PROCID", "3"},
                                             {"SLURM_LOCALID", "1"},
                                             {"SLURM_NTASKS", "8"},
                                             {"SLURM_TASKS_PER_NODE", "2(x4)"}};
  launch::RunArgs a;
  a.command = {"true"};
  auto cfg = launch::resolve_run_config(a, map_env(vars));
  auto w = dist::WorkerEnv::from(map_env(vars));
  EXPECT_EQ(cfg.master_addr, "n1-ib3");
  EXPECT_EQ(w.master_addr, cfg.master_addr);
  EXPECT_EQ(w.master_port, cfg.master_port);
  EXPECT_EQ(w.master_port, 10000 + 4242);
  EXPECT_EQ(w.local_world_size, cfg.nproc_per_node);
  EXPECT_EQ(w.node_rank, cfg.node_rank);
  EXPECT_EQ(w.rank, 3);
}

TEST(JobEnv, WorkersReadUnevenTasksPerNodeAndBigJobIds) {
  auto w = dist::WorkerEnv::from(map_env({{"SLURM_JOB_ID", "98765432"},
                                          {"SLURM_JOB_NODELIST", "x[007-009]"},
                                          {"SLURM_PROCID", "4"},
                                          {"SLURM_LOCALID", "0"},
                                          {"SLURM_NODEID", "2"},
                                          {"SLURM_NTASKS", "5"},
                                          {"SLURM_TASKS_PER_NODE", "2(x2),1"}}));
  EXPECT_EQ(w.local_world_size, 1);
  EXPECT_EQ(w.master_addr, "x007");
  EXPECT_EQ(w.master_port, 10000 + 98765432 % 50000);
}

// --- WorkerEnv: the launcher decided once, as an enum; values read by util/parse.h ---
TEST(WorkerEnvSource, TheLauncherIsAnEnumWithItsPrintedName) {
  using dist::WorkerSource;
  auto single = dist::WorkerEnv::from(map_env({}));
  EXPECT_EQ(single.source, WorkerSource::kSingle);
  auto torchrun = dist::WorkerEnv::from(map_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  EXPECT_EQ(torchrun.source, WorkerSource::kTorchrun);
  auto slurm = dist::WorkerEnv::from(map_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(slurm.source, WorkerSource::kSlurm);
  EXPECT_EQ(dist::source_name(WorkerSource::kSingle), "single");
  EXPECT_EQ(dist::source_name(WorkerSource::kTorchrun), "torchrun");
  EXPECT_EQ(dist::source_name(WorkerSource::kSlurm), "slurm");
}

// An elastic job's node range reaches the workers (trainbox train keeps the global batch by it):
// what the launcher writes for --nnodes 2:3, the worker reads; a fixed job has none.
TEST(WorkerEnvSource, TheElasticRangeGoesFromTheLauncherToTheWorker) {
  launch::RunArgs a;
  a.command = {"true"};
  a.set("--rdzv-backend", "c10d");
  a.set("--rdzv-endpoint", "h:29400");
  a.set("--nnodes", "2:3");
  auto cfg = launch::resolve_run_config(a, map_env({}));
  cfg.nnodes = 3;  // what an attempt's rendezvous makes it: MIN is kept apart
  std::map<std::string, std::string> vars;
  for (const auto& [k, v] : launch::worker_env(cfg, 0, 0, map_env({}))) vars[k] = v;
  EXPECT_EQ(vars[kElasticNnodesEnv], "2:3");
  auto w = dist::WorkerEnv::from(map_env(vars));
  EXPECT_TRUE(w.elastic());
  EXPECT_EQ(w.nnodes_min, 2);
  EXPECT_EQ(w.nnodes_max, 3);
  a.set("--nnodes", "2");
  for (const auto& [k, v] : launch::worker_env(launch::resolve_run_config(a, map_env({})), 0, 0, map_env({})))
    EXPECT_NE(k, kElasticNnodesEnv);
  EXPECT_FALSE(dist::WorkerEnv::from(map_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}})).elastic());
  try {
    dist::WorkerEnv::from(map_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {kElasticNnodesEnv, "3"}}));
    ADD_FAILURE() << "no error for a range without MIN:MAX";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("TRAINBOX_ELASTIC_NNODES=3 is not MIN:MAX"), std::string::npos);
  }
}

TEST(WorkerEnvSource, AgentStoreTakesEveryTruthySpelling) {
  auto agent = [](const char* v) {
    return dist::WorkerEnv::from(map_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", v}}))
        .use_agent_store;
  };
  for (const char* v : {"True", "true", "1", "yes", "ON"}) EXPECT_TRUE(agent(v)) << v;
  for (const char* v : {"False", "false", "0", "", "maybe"}) EXPECT_FALSE(agent(v)) << v;
}

TEST(WorkerEnvSource, ABadNumberNamesTheVariableAndWhatIsAllowed) {
  auto error = [](std::map<std::string, std::string> vars) -> std::string {
    try {
      (void)dist::WorkerEnv::from(map_env(std::move(vars)));
    } catch (const UsageError& e) {
      EXPECT_EQ(e.hint(), "fix the launcher's environment");
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "RANK=x: must be a whole number from 0 to 16777216");
  EXPECT_EQ(error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}),
            "MASTER_PORT=70000: must be a whole number from 1 to 65535");
  EXPECT_EQ(error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_ID", "-3"}}),
            "SLURM_JOB_ID=-3: must be a whole number >= 0");
}
