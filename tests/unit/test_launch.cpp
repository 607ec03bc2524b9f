// The launcher's pure parts: RunConfig from CLI/PET_*/Slurm/Kubeflow, the exact worker
// environment (torchrun's variables), line splitting, error files, the port check.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <trainbox/launch/error_file.h>
#include <trainbox/launch/line_buffer.h>
#include <trainbox/launch/ports.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/fatal_origin.h>
#include <trainbox/util/process.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/unique_fd.h>

#include "temp_dir.h"

using namespace trainbox;
using namespace trainbox::launch;

namespace {
// torchrun's contract, exactly: the Python instrumentation's two variables are tested apart
// (LaunchPythonInstrument).
RunArgs with_command(RunArgs a = {}) {
  a.command = {"python3", "train.py"};
  a.set("--no-instrument");
  return a;
}
RunConfig resolve(RunArgs a, std::map<std::string, std::string> env = {}) {
  return resolve_run_config(with_command(std::move(a)), map_env(std::move(env)));
}
// The UsageError's message, or "" when `f` did not throw one (other exceptions escape).
template <class F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_FALSE(e.hint().empty()) << "every usage error says how to fix it: " << e.what();
    return e.what();
  }
  return {};
}
}  // namespace

// --- --nproc-per-node ---
TEST(LaunchNproc, CountsAndKeywords) {
  EXPECT_EQ(resolve_nproc("4", 0, 16), 4);
  EXPECT_EQ(resolve_nproc(" 2 ", 8, 16), 2);
  EXPECT_EQ(resolve_nproc("cpu", 8, 16), 16);
  EXPECT_EQ(resolve_nproc("gpu", 8, 16), 8);
  EXPECT_EQ(resolve_nproc("auto", 8, 16), 8);   // GPUs when there are any
  EXPECT_EQ(resolve_nproc("auto", 0, 16), 16);  // else CPUs (torchrun's rule)
}

TEST(LaunchNproc, BadValuesAreUsageErrors) {
  EXPECT_NE(usage_error([] { resolve_nproc("0", 0, 4); }).find("--nproc-per-node 0"), std::string::npos);
  EXPECT_NE(usage_error([] { resolve_nproc("-1", 0, 4); }), "");
  EXPECT_NE(usage_error([] { resolve_nproc("two", 0, 4); }).find("two"), std::string::npos);
  EXPECT_NE(usage_error([] { resolve_nproc("", 0, 4); }), "");
  EXPECT_NE(usage_error([] { resolve_nproc("gpu", 0, 4); }).find("no NVIDIA GPU"), std::string::npos);
}

TEST(LaunchNproc, ThisMachine) {
  // coreutils' nproc counts the CPUs this process may use, as "cpu" should.
  auto r = run_capture({"/usr/bin/nproc"});
  if (r.exit_code == 0) {
    EXPECT_EQ(resolve_nproc("cpu"), std::stoi(r.out));
  }
  EXPECT_GE(resolve_nproc("cpu"), 1);
  int gpus = visible_gpu_count();
  EXPECT_EQ(resolve_nproc("auto"), gpus > 0 ? gpus : resolve_nproc("cpu"));
}

// --- defaults and fallbacks ---
TEST(RunConfig, TorchrunDefaults) {
  RunConfig c = resolve({});
  EXPECT_EQ(c.nproc_per_node, 1);
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_EQ(c.max_restarts, 0);
  EXPECT_EQ(c.run_id, "none");
  EXPECT_EQ(c.grace_period_s, 30);
  EXPECT_TRUE(c.prefix);
  EXPECT_EQ(c.scheduler, "");
  EXPECT_EQ(c.command, (std::vector<std::string>{"python3", "train.py"}));
}

TEST(RunConfig, PetVariablesFillWhatTheCliLeavesOpen) {
  std::map<std::string, std::string> env = {
      {"PET_NPROC_PER_NODE", "3"},     {"PET_NNODES", "4"},          {"PET_NODE_RANK", "2"},
      {"PET_MASTER_ADDR", "10.0.0.7"}, {"PET_MASTER_PORT", "1234"},  {"PET_MAX_RESTARTS", "5"},
      {"PET_RUN_ID", "job-9"},         {"PET_LOG_DIR", "/tmp/logs"}, {"PET_GRACE_PERIOD", "2.5"}};
  RunConfig c = resolve({}, env);
  EXPECT_EQ(c.nproc_per_node, 3);
  EXPECT_EQ(c.nnodes, 4);
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.master_addr, "10.0.0.7");
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_EQ(c.max_restarts, 5);
  EXPECT_EQ(c.run_id, "job-9");
  EXPECT_EQ(c.log_dir, "/tmp/logs");
  EXPECT_TRUE(c.log_dir_given);
  EXPECT_DOUBLE_EQ(c.grace_period_s, 2.5);

  RunArgs cli;  // the CLI wins over PET_*
  cli.set("--nproc-per-node", "2");
  cli.set("--node-rank", "3");
  cli.set("--master-port", "4321");
  RunConfig d = resolve(cli, env);
  EXPECT_EQ(d.nproc_per_node, 2);
  EXPECT_EQ(d.node_rank, 3);
  EXPECT_EQ(d.master_port, 4321);
  EXPECT_EQ(d.nnodes, 4);

  EXPECT_EQ(resolve({}, {{"PET_RDZV_ID", "r7"}}).run_id, "r7");  // torchrun's own name
}

TEST(RunConfig, ErrorsNameTheSourceOfTheBadValue) {
  EXPECT_NE(usage_error([] { resolve({}, {{"PET_NNODES", "0"}}); }).find("PET_NNODES=0"), std::string::npos);
  RunArgs a;
  a.set("--nnodes", "0");
  EXPECT_NE(usage_error([&] { resolve(a, {{"PET_NNODES", "2"}}); }).find("--nnodes 0"), std::string::npos);
}

TEST(RunConfig, Slurm) {
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "123456"},
                                            {"SLURM_NNODES", "4"},
                                            {"SLURM_NODEID", "2"},
                                            {"SLURM_NTASKS_PER_NODE", "8"},
                                            {"SLURM_JOB_NODELIST", "gnode[10-12,20]"}};
  RunConfig c = resolve({}, env);
  EXPECT_EQ(c.scheduler, "slurm");
  EXPECT_EQ(c.nnodes, 4);
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.nproc_per_node, 8);
  EXPECT_EQ(c.master_addr, "gnode10");
  EXPECT_EQ(c.master_port, 10000 + 123456 % 50000);
  EXPECT_EQ(c.run_id, "123456");

  env["MASTER_PORT"] = "23000";  // exported in the batch script: kept
  env["MASTER_ADDR"] = "head";
  RunConfig d = resolve({}, env);
  EXPECT_EQ(d.master_port, 23000);
  EXPECT_EQ(d.master_addr, "head");

  env["PET_NNODES"] = "2";  // torchrun's variables and the CLI still win
  env["PET_NODE_RANK"] = "1";
  RunArgs a;
  a.set("--nproc-per-node", "2");
  RunConfig e = resolve(a, env);
  EXPECT_EQ(e.nnodes, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.nproc_per_node, 2);
}

TEST(RunConfig, Kubeflow) {
  std::map<std::string, std::string> env = {{"MASTER_ADDR", "job-master-0"},
                                            {"MASTER_PORT", "23456"},
                                            {"WORLD_SIZE", "3"},
                                            {"RANK", "2"},
                                            {"PET_NPROC_PER_NODE", "4"},
                                            {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  RunConfig c = resolve({}, env);
  EXPECT_EQ(c.scheduler, "kubeflow");
  EXPECT_EQ(c.master_addr, "job-master-0");
  EXPECT_EQ(c.master_port, 23456);
  EXPECT_EQ(c.nnodes, 3);     // WORLD_SIZE counts pods
  EXPECT_EQ(c.node_rank, 2);  // RANK is the pod index
  EXPECT_EQ(c.nproc_per_node, 4);

  env["PET_NNODES"] = "5";  // the operator's PET_NNODES wins over WORLD_SIZE
  EXPECT_EQ(resolve({}, env).nnodes, 5);

  // Inside another launcher's worker: WORLD_SIZE counts processes, so it must not become nnodes.
  env.erase("PET_NNODES");
  env["LOCAL_RANK"] = "0";
  RunConfig nested = resolve({}, env);
  EXPECT_EQ(nested.scheduler, "");
  EXPECT_EQ(nested.nnodes, 1);
  EXPECT_EQ(nested.master_port, 29500);
}

TEST(RunConfig, StandaloneIsOneLocalNode) {
  RunArgs a;
  a.set("--standalone");
  RunConfig c = resolve(a, {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "4"}, {"SLURM_NODEID", "3"}});
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 0);  // launch() picks a free one
  EXPECT_NE(c.run_id, "none");
  EXPECT_NE(c.run_id, resolve(a).run_id);  // fresh per run

  a.set("--nnodes", "2");
  EXPECT_NE(usage_error([&] { resolve(a); }).find("--nnodes 2"), std::string::npos);
  RunArgs b;
  b.set("--standalone");
  b.set("--master-port", "29500");
  EXPECT_NE(usage_error([&] { resolve(b); }).find("--master-port"), std::string::npos);
}

TEST(RunConfig, BadValuesAreUsageErrors) {
  auto bad = [](auto setter) {
    RunArgs a;
    setter(a);
    return usage_error([&] { resolve(a); });
  };
  EXPECT_NE(bad([](RunArgs& a) { a.set("--nproc-per-node", "0"); }).find("--nproc-per-node 0"), std::string::npos);
  std::string rank_msg = bad([](RunArgs& a) {
    a.set("--nnodes", "2");
    a.set("--node-rank", "2");
  });
  EXPECT_NE(rank_msg.find("--node-rank 2"), std::string::npos) << rank_msg;
  EXPECT_NE(bad([](RunArgs& a) { a.set("--node-rank", "-1"); }), "");
  EXPECT_NE(bad([](RunArgs& a) { a.set("--master-port", "0"); }).find("--master-port 0"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--master-port", "70000"); }).find("70000"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--master-port", "http"); }).find("http"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--master-addr", ""); }), "");
  EXPECT_NE(bad([](RunArgs& a) { a.set("--nnodes", "1:4"); }).find("elastic node range needs --rdzv-backend c10d"),
            std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--max-restarts", "-1"); }), "");
  EXPECT_NE(bad([](RunArgs& a) { a.set("--grace-period", "-3"); }), "");
  EXPECT_NE(bad([](RunArgs& a) { a.set("--grace-period", "soon"); }), "");
  // The 1e9 cap every other duration has (issue 19: --grace-period parsed on its own and lacked it).
  EXPECT_EQ(bad([](RunArgs& a) { a.set("--grace-period", "1e12"); }),
            "--grace-period 1e12: must be a number of seconds from 0 to 1e9");
  EXPECT_NE(bad([](RunArgs& a) { a.set("--redirects", "4"); }), "");
  EXPECT_NE(bad([](RunArgs& a) { a.set("--tee", "5:1"); }).find("'5'"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--local-ranks-filter", "0,7"); }).find("'7'"), std::string::npos);
  EXPECT_NE(usage_error([] { resolve_run_config(RunArgs{}, map_env({})); }).find("no command"), std::string::npos);
  // Fixed N:N is fine.
  RunArgs ok;
  ok.set("--nnodes", "2:2");
  ok.set("--node-rank", "1");
  EXPECT_EQ(resolve(ok).nnodes, 2);
}

// --on-stall is parsed once, into StallAction; the CLI wins over TRAINBOX_ON_STALL.
TEST(RunConfig, OnStallIsAnActionParsedOnce) {
  EXPECT_EQ(resolve({}).on_stall, StallAction::kKill);
  RunArgs a;
  a.set("--on-stall", "restart");
  EXPECT_EQ(resolve(a, {{"TRAINBOX_ON_STALL", "dump"}}).on_stall, StallAction::kRestart);
  EXPECT_EQ(resolve({}, {{"TRAINBOX_ON_STALL", "dump"}}).on_stall, StallAction::kDump);
  for (auto action : {StallAction::kDump, StallAction::kKill, StallAction::kRestart})
    EXPECT_EQ(parse_stall_action(stall_action_name(action)), action);
  a.set("--on-stall", "Kill");
  EXPECT_EQ(usage_error([&] { resolve(a); }), "--on-stall Kill: not an action");
  EXPECT_EQ(usage_error([] {
              resolve({}, {{"TRAINBOX_ON_STALL", "panic"}});
            }),
            "TRAINBOX_ON_STALL=panic: not an action");
}

TEST(RunConfig, StreamsAndFilter) {
  RunArgs a;
  a.set("--nproc-per-node", "4");
  a.set("--redirects", "3");
  a.set("--tee", "0:1,2:2");
  a.set("--local-ranks-filter", "2,0,2");
  RunConfig c = resolve(a);
  EXPECT_EQ(c.redirects.of(1), 3);
  EXPECT_EQ(c.tee.of(0), kStdout);
  EXPECT_EQ(c.tee.of(1), 0);
  EXPECT_EQ(c.tee.of(2), kStderr);
  EXPECT_EQ(c.local_ranks_filter, (std::vector<int>{0, 2}));
}

// --- the worker environment: exactly torchrun's variables ---
TEST(LaunchWorkerEnv, ExactVariablesForNodeRank1Of2With2Procs) {
  RunArgs a;
  a.set("--nnodes", "2");
  a.set("--node-rank", "1");
  a.set("--nproc-per-node", "2");
  a.set("--master-addr", "10.1.1.1");
  a.set("--master-port", "29555");
  a.set("--run-id", "job7");
  a.set("--max-restarts", "3");
  a.set("--log-dir", "/logs");
  RunConfig c = resolve(a);
  auto env = map_env({});
  for (int local : {0, 1}) {
    auto vars = worker_env(c, local, 2, env);
    std::map<std::string, std::string> got(vars.begin(), vars.end());
    EXPECT_EQ(got.size(), vars.size()) << "no variable twice";
    std::string rank = std::to_string(2 + local);
    std::map<std::string, std::string> want = {
        {"RANK", rank},
        {"LOCAL_RANK", std::to_string(local)},
        {"GROUP_RANK", "1"},
        {"ROLE_RANK", rank},
        {"ROLE_NAME", "default"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"WORLD_SIZE", "4"},
        {"GROUP_WORLD_SIZE", "2"},
        {"ROLE_WORLD_SIZE", "4"},
        {"MASTER_ADDR", "10.1.1.1"},
        {"MASTER_PORT", "29555"},
        {"TORCHELASTIC_RESTART_COUNT", "2"},
        {"TORCHELASTIC_MAX_RESTARTS", "3"},
        {"TORCHELASTIC_RUN_ID", "job7"},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"},
        {"TORCHELASTIC_ERROR_FILE", "/logs/attempt_2/" + rank + "/error.json"},
        {"TRAINBOX_LAUNCHER_SAYS_USAGE_ERRORS", "1"},  // a usage error is said once, by the launcher
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
        {"TRAINBOX_RESULT_FILE", "/logs/attempt_2/" + rank + "/result.json"},
        {"TRAINBOX_HEARTBEAT_FILE", "/logs/attempt_2/" + rank + "/heartbeat"},
        // NCCL's flight recorder, on unless the user set it (dumps land in the attempt's folder).
        {"TORCH_FR_BUFFER_SIZE", "2000"},
        {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
        {"TORCH_FR_DUMP_TEMP_FILE", "/logs/attempt_2/nccl_trace_rank_"},
        {"OMP_NUM_THREADS", "1"},
    };
    EXPECT_EQ(got, want) << "local rank " << local;
  }
}

TEST(LaunchWorkerEnv, KeepsTheUsersThreadAndNcclSettings) {
  RunArgs a;
  a.set("--nproc-per-node", "2");
  RunConfig c = resolve(a);
  auto env = map_env({{"OMP_NUM_THREADS", "8"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  auto vars = worker_env(c, 0, 0, env);
  std::map<std::string, std::string> got(vars.begin(), vars.end());
  EXPECT_EQ(got.count("OMP_NUM_THREADS"), 0u);  // inherited as set, not overridden
  EXPECT_EQ(got.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
  EXPECT_FALSE(sets_omp_num_threads(c, env));
  // One process: no OMP override (torchrun only sets it for nproc > 1).
  RunConfig one = resolve({});
  auto single = worker_env(one, 0, 0, map_env({}));
  EXPECT_EQ(std::count_if(single.begin(), single.end(), [](auto& kv) { return kv.first == "OMP_NUM_THREADS"; }), 0);
  EXPECT_EQ(single.size(), 24u);
  // The user's flight-recorder settings (old or new names) win over ours.
  auto fr = worker_env(one, 0, 0,
                       map_env({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "0"},
                                {"TORCH_FR_DUMP_TEMP_FILE", "/x/"},
                                {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"}}));
  for (const auto& [k, v] : fr)
    EXPECT_TRUE(k != "TORCH_FR_BUFFER_SIZE" && k != "TORCH_FR_DUMP_TEMP_FILE" && k != "TORCH_NCCL_DUMP_ON_TIMEOUT")
        << k;
}

TEST(LaunchWorkerEnv, ResultFileIsPerRankEvenWhenTheUserExportedOne) {
  RunArgs a;
  a.set("--nproc-per-node", "2");
  a.set("--log-dir", "/logs");
  RunConfig c = resolve(a);
  auto env = map_env({{"TRAINBOX_RESULT_FILE", "/home/me/result.json"}});
  for (int local : {0, 1}) {
    auto vars = worker_env(c, local, 1, env);
    std::map<std::string, std::string> got(vars.begin(), vars.end());
    EXPECT_EQ(got.at("TRAINBOX_RESULT_FILE"), fmt::format("/logs/attempt_1/{}/result.json", local));
  }
}

// --- console lines ---
TEST(LaunchLineBuffer, WholeLinesOnlyPartialHeldUntilEnd) {
  LineBuffer b;
  EXPECT_EQ(b.feed("hel"), std::vector<std::string>{});
  EXPECT_EQ(b.feed("lo\nwor"), std::vector<std::string>{"hello\n"});
  EXPECT_EQ(b.feed("ld\n\nx"), (std::vector<std::string>{"world\n", "\n"}));
  EXPECT_EQ(b.finish(), std::optional<std::string>("x\n"));
  EXPECT_EQ(b.finish(), std::nullopt);
}

TEST(LaunchLineBuffer, CarriageReturns) {
  LineBuffer b;
  EXPECT_EQ(b.feed(" 10%\r 20%\r"), std::vector<std::string>{" 10%\r"});  // last \r: maybe \r\n
  EXPECT_EQ(b.feed("\nnext\r\n"), (std::vector<std::string>{" 20%\r\n", "next\r\n"}));
  EXPECT_EQ(b.feed("50%\r"), std::vector<std::string>{});
  EXPECT_EQ(b.finish(), std::optional<std::string>("50%\r\n"));
}

TEST(LaunchLineBuffer, EndlessLineIsCut) {
  LineBuffer b;
  auto lines = b.feed(std::string(LineBuffer::kMaxLine + 10, 'a'));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].size(), LineBuffer::kMaxLine + 1);
  EXPECT_EQ(b.finish(), std::optional<std::string>(std::string(10, 'a') + "\n"));
}

// --- error files ---
TEST(LaunchErrorFile, ReadsTorchElasticFormats) {
  auto dir = std::filesystem::temp_directory_path() / ("trainbox-errfile-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / "error.json").string();
  // What torch.distributed.elastic's @record writes (error_handler.py).
  std::ofstream(path)
      << R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"w.py\", line 3\nValueError: boom\n", "timestamp": "1700000000"}}})";
  auto e = read_error_file(path);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "ValueError: boom");
  EXPECT_NE(e->traceback.find("line 3"), std::string::npos);
  EXPECT_EQ(e->timestamp, 1700000000);
  std::ofstream(path) << R"({"message": "RuntimeError: flat", "timestamp": 1700000001})";
  e = read_error_file(path);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "RuntimeError: flat");
  EXPECT_EQ(e->timestamp, 1700000001);
  std::ofstream(path) << "{not json";
  EXPECT_FALSE(read_error_file(path));
  EXPECT_FALSE(read_error_file((dir / "missing.json").string()));
  std::filesystem::remove_all(dir);
}

// --- ports ---
TEST(LaunchPorts, FreePortIsBindable) {
  int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  EXPECT_NO_THROW(check_port_available("127.0.0.1", port));
}

TEST(LaunchPorts, BusyPortIsAUsageErrorNamingAddressPortAndHolder) {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(s);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);  // port 0: the kernel's pick
  ASSERT_EQ(listen(s.get(), 1), 0);
  socklen_t len = sizeof sa;
  getsockname(s.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  int port = ntohs(sa.sin_port);

  std::string msg = usage_error([&] { check_port_available("127.0.0.1", port); });
  EXPECT_NE(msg.find(std::to_string(port)), std::string::npos) << msg;
  EXPECT_NE(msg.find("127.0.0.1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(getpid())), std::string::npos) << msg;
  try {
    check_port_available("127.0.0.1", port);
  } catch (const UsageError& e) {
    EXPECT_NE(e.hint().find("--standalone"), std::string::npos);
  }
  // Held on loopback only, still in use for the wildcard the TCPStore listens on.
  EXPECT_NE(usage_error([&] { check_port_available("localhost", port); }), "");
  s.reset();
  EXPECT_NO_THROW(check_port_available("127.0.0.1", port));  // released: nothing stays bound
}

TEST(RunInChild, ReturnsWhatTheChildReturned) {
  auto r = run_in_child([] { return std::string("pid ") + std::to_string(getpid()); }, 10000);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("pid ", 0), 0u);
  EXPECT_NE(r.out, "pid " + std::to_string(getpid()));  // it ran in another process
}

TEST(RunInChild, AnExceptionIsExitCodeOneWithItsMessage) {
  auto r = run_in_child([]() -> std::string { throw std::runtime_error("probe failed"); }, 10000);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "probe failed");
}

TEST(RunInChild, AHungChildIsKilledAtTheDeadline) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_in_child(
      [] {
        pause();
        return std::string("never");
      },
      200);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_TRUE(r.out.empty());
  EXPECT_LT(ms, 5000);
}

// --- the result-file contract (util/result_file.h) ---
namespace {
// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};
}  // namespace

// --- fatal lines name the host where a job spans nodes (util/fatal_origin.h) ---
TEST(FatalOrigin, ErrorLineNamesHostAndRankOnlyWhenTheJobSpansNodes) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  ScopedEnv slurm("SLURM_NNODES", nullptr);
  {
    ScopedEnv nodes("GROUP_WORLD_SIZE", "1"), rank("RANK", "3");
    EXPECT_EQ(fatal_origin(), "");
    testing::internal::CaptureStderr();
    EXPECT_EQ(report_error(DataError("no such file", "pass --data")), kExitUsage);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "trainbox: error: no such file\n  fix: pass --data\n");
  }
  {
    ScopedEnv nodes("GROUP_WORLD_SIZE", "2"), rank("RANK", "3");
    EXPECT_EQ(fatal_origin(), std::string(host) + " rank 3");
    testing::internal::CaptureStderr();
    EXPECT_EQ(report_error(DataError("no such file", "pass --data")), kExitUsage);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              fmt::format("trainbox: error [{} rank 3]: no such file\n  fix: pass --data\n", host));
    EXPECT_EQ(fatal_line_start("trainbox", "internal error"),
              fmt::format("trainbox: internal error [{} rank 3]: ", host));
  }
  {  // srun's own tasks (a launcher per node): the host alone
    ScopedEnv nodes("GROUP_WORLD_SIZE", nullptr), rank("RANK", nullptr), s("SLURM_NNODES", "4");
    EXPECT_EQ(fatal_origin(), host);
  }
}

TEST(ResultFile, RankZeroWritesCompactJsonToTheFileOthersNothing) {
  test::TempDir d;
  const std::string path = d.path + "/result.json";
  ScopedEnv env("TRAINBOX_RESULT_FILE", path.c_str());
  write_result(nlohmann::json{{"rank", 1}}, 1);
  EXPECT_FALSE(std::filesystem::exists(path));
  testing::internal::CaptureStdout();
  write_result(nlohmann::json{{"ok", true}, {"bytes", 8}}, 0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(read_file(path).value_or("<none>"), "{\"bytes\":8,\"ok\":true}\n");
  // Atomic: only the file itself is left, no temporary beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path), std::filesystem::directory_iterator()), 1);
}

TEST(ResultFile, WithoutTheVariableRankZeroPrintsIndentedJson) {
  for (const char* unset_or_empty : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnv env("TRAINBOX_RESULT_FILE", unset_or_empty);
    testing::internal::CaptureStdout();
    write_result(nlohmann::json{{"ok", true}}, 0);
    write_result(nlohmann::json{{"ok", false}}, 3);
    EXPECT_EQ(testing::internal::GetCapturedStdout(), "{\n  \"ok\": true\n}\n");
  }
}

TEST(ResultFile, AnUnwritablePathIsASystemErrorNamingIt) {
  test::TempDir d;
  const std::string path = d.path + "/no-such-folder/result.json";
  ScopedEnv env("TRAINBOX_RESULT_FILE", path.c_str());
  try {
    write_result(nlohmann::json{{"ok", true}}, 0);
    FAIL() << "no SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(ResultFile, ForwardPassesBytesOnVerbatim) {
  test::TempDir d;
  const std::string path = d.path + "/result.json";
  {
    ScopedEnv env("TRAINBOX_RESULT_FILE", path.c_str());
    forward_result("{\"a\": 1}");  // no newline added, nothing reformatted
    EXPECT_EQ(read_file(path).value_or("<none>"), "{\"a\": 1}");
  }
  ScopedEnv env("TRAINBOX_RESULT_FILE", nullptr);
  testing::internal::CaptureStdout();
  forward_result("{\"a\":1}\n");
  forward_result("");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "{\"a\":1}\n");
}

TEST(ResultFile, RunForResultReadsTheFileNotStdoutAndCleansUp) {
  test::TempDir d;
  ScopedEnv tmpdir("TMPDIR", d.path.c_str());
  ScopedEnv user("TRAINBOX_RESULT_FILE", (d.path + "/the-users.json").c_str());  // replaced for the child
  auto r = run_for_result(
      {"/bin/sh", "-c",
       "echo 'NCCL INFO chatter'; case $TRAINBOX_RESULT_FILE in " + d.path +
           "/trainbox-result-*/result.json) printf '{\"ok\":true}\\n' >\"$TRAINBOX_RESULT_FILE\";; esac; "
           "exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.result, "{\"ok\":true}\n");
  EXPECT_EQ(r.out, "NCCL INFO chatter\n");
  EXPECT_FALSE(std::filesystem::exists(d.path + "/the-users.json"));
  EXPECT_TRUE(std::filesystem::is_empty(d.path)) << "the temporary folder is removed";

  auto silent = run_for_result({"/bin/sh", "-c", "echo '{\"not\": \"a result\"}'"});
  EXPECT_EQ(silent.exit_code, 0);
  EXPECT_EQ(silent.result, "") << "a child that does not know the contract has no result";
}

// --- torchrun's Python habits and rendezvous options ---
TEST(RunConfig, PyScriptsAndModulesRunThroughPython) {
  test::TempDir tmp;
  const std::filesystem::path dir = tmp.path;
  auto fake = [&](const std::string& sub) {
    std::filesystem::create_directories(dir / sub);
    auto p = dir / sub / "python3";
    std::ofstream(p) << "#!/bin/sh\n";
    std::filesystem::permissions(p, std::filesystem::perms::owner_all);
    return p.string();
  };
  const std::string on_path = fake("bin"), chosen = fake("chosen"), venv = fake("venv");
  const std::string path = (dir / "bin").string();
  RunArgs a;
  a.command = {"train.py", "--lr", "1"};
  auto c = resolve_run_config(a, map_env({{"PATH", path}}));
  EXPECT_EQ(c.command, (std::vector<std::string>{on_path, "train.py", "--lr", "1"}));
  c = resolve_run_config(a, map_env({{"PATH", path}, {"TRAINBOX_PYTHON", chosen}}));
  EXPECT_EQ(c.command.front(), chosen);  // $TRAINBOX_PYTHON first
  EXPECT_EQ(resolve_python(map_env({{"PATH", "/nonexistent"}}), (dir / "venv").string()), venv);
  EXPECT_NE(usage_error([&] {
              resolve_python(map_env({{"PATH", "/nonexistent"}}), "/nonexistent");
            }).find("TRAINBOX_PYTHON is unset"),
            std::string::npos);
  EXPECT_NE(usage_error([&] {
              resolve_python(map_env({{"TRAINBOX_PYTHON", "/no/such/python"}}), "");
            }).find("TRAINBOX_PYTHON=/no/such/python"),
            std::string::npos);

  RunArgs m;
  m.set("--module");
  m.command = {"pkg.train", "-x"};
  EXPECT_EQ(resolve_run_config(m, map_env({{"PATH", path}})).command,
            (std::vector<std::string>{on_path, "-m", "pkg.train", "-x"}));
  RunArgs n = a;
  n.set("--no-python");
  EXPECT_EQ(resolve_run_config(n, map_env({{"PATH", path}})).command, a.command);  // as given
  RunArgs other;
  other.command = {"./train.sh"};
  EXPECT_EQ(resolve_run_config(other, map_env({{"PATH", path}})).command, other.command);
  m.set("--no-python");
  EXPECT_NE(usage_error([&] { resolve_run_config(m, map_env({})); }).find("-m and --no-python"), std::string::npos);
}

TEST(RunConfig, C10dRendezvousOptions) {
  RunArgs a;
  a.set("--rdzv-backend", "c10d");
  a.set("--rdzv-endpoint", "node1");
  a.set("--nnodes", "2");
  RunConfig c = resolve(a);
  EXPECT_TRUE(c.c10d());
  EXPECT_EQ(c.rdzv.host, "node1");
  EXPECT_EQ(c.rdzv.port, 29400);  // torchrun's c10d default
  EXPECT_EQ(c.rdzv.join_timeout_s, 600);
  EXPECT_LE(c.rdzv.heartbeat_timeout_s, 10);
  EXPECT_TRUE(c.notes.empty());

  a.set("--rdzv-endpoint", "[fe80::1]:1234");
  a.set("--rdzv-conf", "join_timeout=30, read_timeout=7,heartbeat_interval=0.5,heartbeat_timeout=3");
  a.set("--node-rank", "1");
  a.set("--master-port", "1111");
  c = resolve(a);
  EXPECT_EQ(c.rdzv.host, "fe80::1");
  EXPECT_EQ(c.rdzv.port, 1234);
  EXPECT_EQ(c.rdzv.join_timeout_s, 30);
  EXPECT_EQ(c.rdzv.read_timeout_s, 7);
  EXPECT_EQ(c.rdzv.heartbeat_interval_s, 0.5);
  EXPECT_EQ(c.rdzv.heartbeat_timeout_s, 3);
  EXPECT_FALSE(c.rdzv.is_host.has_value());
  ASSERT_EQ(c.notes.size(), 2u);  // --node-rank and --master-port: accepted, ignored, said so
  EXPECT_NE(c.notes[0].find("--node-rank 1 is ignored"), std::string::npos);
  EXPECT_NE(c.notes[1].find("--master-port 1111 is ignored"), std::string::npos);

  // PET_* fallbacks, and Slurm's node id ignored silently (the rendezvous assigns ranks).
  RunConfig p = resolve({}, {{"PET_RDZV_BACKEND", "c10d"},
                             {"PET_RDZV_ENDPOINT", "h:5"},
                             {"PET_NNODES", "3"},
                             {"PET_RDZV_CONF", "join_timeout=9"},
                             {"PET_MONITOR_INTERVAL", "0.5"},
                             {"PET_LOCAL_ADDR", "10.0.0.2"},
                             {"SLURM_JOB_ID", "5"},
                             {"SLURM_NODEID", "2"}});
  EXPECT_TRUE(p.c10d());
  EXPECT_EQ(p.rdzv.host, "h");
  EXPECT_EQ(p.rdzv.port, 5);
  EXPECT_EQ(p.nnodes, 3);
  EXPECT_EQ(p.rdzv.join_timeout_s, 9);
  EXPECT_EQ(p.monitor_interval_s, 0.5);
  EXPECT_EQ(p.rdzv.local_addr, "10.0.0.2");
  EXPECT_TRUE(p.notes.empty());
}

TEST(RunConfig, C10dUnderSlurmNeedsNoEndpoint) {
  RunArgs a;
  a.set("--rdzv-backend", "c10d");
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "123456"},
                                            {"SLURM_JOB_NODELIST", "n[1-2]-ib[3,4]"},
                                            {"SLURM_NNODES", "4"},
                                            {"SLURM_NODEID", "2"}};
  RunConfig c = resolve(a, env);
  EXPECT_EQ(c.rdzv.host, "n1-ib3");
  EXPECT_EQ(c.rdzv.port, slurm_master_port(123456));
  EXPECT_EQ(c.run_id, "123456");
  EXPECT_EQ(c.nnodes, 4);
  EXPECT_TRUE(c.notes.empty());           // SLURM_NODEID is ignored silently
  a.set("--rdzv-endpoint", "head:1234");  // an explicit endpoint wins
  EXPECT_EQ(resolve(a, env).rdzv.host, "head");
  RunArgs st;  // static under Slurm: no endpoint invented
  EXPECT_EQ(resolve(st, env).rdzv.host, "");
}

TEST(RunConfig, IsHostFromTorchrunsRdzvConf) {
  RunArgs a;
  a.set("--rdzv-backend", "c10d");
  a.set("--rdzv-endpoint", "svc:29400");
  a.set("--rdzv-conf", "is_host=1");
  EXPECT_EQ(resolve(a).rdzv.is_host, true);
  a.set("--rdzv-conf", "is_host=false,join_timeout=5");
  EXPECT_EQ(resolve(a).rdzv.is_host, false);
}

TEST(RunConfig, StaticEndpointIsTheMaster) {
  RunArgs a;
  a.set("--rdzv-backend", "static");
  a.set("--rdzv-endpoint", "10.0.0.1:23456");
  RunConfig c = resolve(a);
  EXPECT_FALSE(c.c10d());
  EXPECT_EQ(c.master_addr, "10.0.0.1");
  EXPECT_EQ(c.master_port, 23456);
}

// --nnodes MIN:MAX with c10d is an elastic job; N:N is N; the settle windows come from --rdzv-conf.
TEST(RunConfig, ElasticRangesNeedTheC10dBackend) {
  RunArgs a;
  a.set("--rdzv-backend", "c10d");
  a.set("--rdzv-endpoint", "h:29400");
  a.set("--nnodes", "2:3");
  a.set("--rdzv-conf", "last_call=0.5,admit_backoff=1");
  const RunConfig c = resolve(a);
  EXPECT_TRUE(c.elastic());
  EXPECT_EQ(c.nnodes, 2);
  EXPECT_EQ(c.nnodes_max, 3);
  EXPECT_EQ(c.rdzv.last_call_s, 0.5);
  EXPECT_EQ(c.rdzv.admit_backoff_s, 1);
  EXPECT_NE(c.job_digest.find("\"program\""), std::string::npos);
  a.set("--nnodes", "2:2");
  EXPECT_FALSE(resolve(a).elastic());
  EXPECT_EQ(resolve(a).nnodes, 2);
}

TEST(RunConfig, BadRendezvousOptionsAreUsageErrors) {
  auto bad = [](auto setter) {
    RunArgs a;
    a.set("--rdzv-backend", "c10d");
    a.set("--rdzv-endpoint", "h:29400");
    setter(a);
    return usage_error([&] { resolve(a); });
  };
  EXPECT_NE(bad([](RunArgs& a) { a.set("--rdzv-backend", "etcd"); }).find("--rdzv-backend etcd: not supported"),
            std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.unset("--rdzv-endpoint"); }).find("needs --rdzv-endpoint"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--rdzv-endpoint", "h:99999"); }).find("99999"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--rdzv-endpoint", ":1"); }), "");
  std::string unknown = bad([](RunArgs& a) { a.set("--rdzv-conf", "shutdown_timeout=5"); });
  EXPECT_NE(unknown.find("unknown key 'shutdown_timeout'"), std::string::npos) << unknown;
  EXPECT_NE(bad([](RunArgs& a) { a.set("--rdzv-conf", "join_timeout"); }).find("not key=value"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--rdzv-conf", "is_host=maybe"); }).find("is_host=maybe: must be 1 or 0"),
            std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--rdzv-conf", "join_timeout=-1"); }), "");
  EXPECT_NE(
      bad([](RunArgs& a) { a.set("--rdzv-conf", "heartbeat_interval=5,heartbeat_timeout=2"); }).find("must exceed"),
      std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--monitor-interval", "0"); }), "");
  // elastic ranges: MIN >= 1, MIN <= MAX, and the c10d backend
  EXPECT_NE(bad([](RunArgs& a) { a.set("--nnodes", "0:2"); }).find("--nnodes 0"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) { a.set("--nnodes", "3:2"); }).find("MIN 3 is larger than MAX 2"), std::string::npos);
  EXPECT_NE(bad([](RunArgs& a) {
              a.set("--nnodes", "1:2");
              a.set("--rdzv-backend", "static");
              a.set("--rdzv-endpoint", "h:29400");
            }).find("an elastic node range needs --rdzv-backend c10d"),
            std::string::npos);
  RunArgs s;
  s.set("--rdzv-backend", "static");
  s.set("--rdzv-endpoint", "h");
  EXPECT_NE(usage_error([&] { resolve(s); }).find("needs a port"), std::string::npos);
}

// --- Python workers' zero-code instrumentation (docs/python.md) ---
TEST(LaunchPythonInstrument, RecognisesPythonCommands) {
  for (std::vector<std::string> c : {std::vector<std::string>{"python3", "x.py"},
                                     {"/usr/bin/python3.11", "-m", "m"},
                                     {"python", "-c", "pass"},
                                     {"/venv/bin/python3"}})
    EXPECT_TRUE(is_python_command(c)) << c.front();
  for (std::vector<std::string> c :
       {std::vector<std::string>{"./train.sh"}, {"trainbox", "train"}, {"pythonista"}, {"python3-config"}, {}})
    EXPECT_FALSE(is_python_command(c)) << (c.empty() ? "(empty)" : c.front());
}

TEST(LaunchPythonInstrument, FindsTheHookBesideTheProgram) {
  test::TempDir t;
  namespace fs = std::filesystem;
  const fs::path venv = fs::path(t.path) / "venv";
  fs::create_directories(venv / "bin");
  // pip: <venv>/bin/trainbox, <venv>/lib/python3.11/site-packages/trainbox/_boot
  t.write("venv/lib/python3.11/site-packages/trainbox/_boot/sitecustomize.py", "# hook\n");
  EXPECT_EQ(find_python_boot((venv / "bin").string()), (venv / "lib/python3.11/site-packages/trainbox/_boot").string());
  // cmake --install: <prefix>/share/trainbox/python/trainbox/_boot wins
  t.write("venv/share/trainbox/python/trainbox/_boot/sitecustomize.py", "# hook\n");
  EXPECT_EQ(find_python_boot((venv / "bin").string()), (venv / "share/trainbox/python/trainbox/_boot").string());
  // elsewhere: the checkout this was built from
  EXPECT_EQ(find_python_boot((fs::path(t.path) / "nowhere/bin").string()),
            fs::weakly_canonical(fs::path(TRAINBOX_SOURCE_DIR) / "python/trainbox/_boot").string());
}

TEST(LaunchPythonInstrument, APythonWorkerGetsTheHookFirstOnItsPythonPath) {
  RunArgs a;
  a.command = {"python3", "train.py"};
  RunConfig c = resolve_run_config(a, map_env({{"PATH", "/usr/bin:/bin"}}));
  ASSERT_FALSE(c.python_boot.empty()) << "a build tree finds the checkout's python/trainbox/_boot";
  auto get = [](const auto& vars, const std::string& k) -> std::string {
    for (const auto& [name, v] : vars)
      if (name == k) return v;
    return "(unset)";
  };
  auto vars = worker_env(c, 0, 0, map_env({}));
  EXPECT_EQ(get(vars, "PYTHONPATH"), c.python_boot);
  EXPECT_EQ(get(vars, "TRAINBOX_INSTRUMENT"), "1");
  // the user's PYTHONPATH stays, after ours (the hook removes itself at start-up)
  EXPECT_EQ(get(worker_env(c, 0, 0, map_env({{"PYTHONPATH", "/mine:/other"}})), "PYTHONPATH"),
            c.python_boot + ":/mine:/other");
  // a .py script becomes a Python command, so it is instrumented too
  RunArgs script;
  script.command = {"train.py"};
  EXPECT_FALSE(resolve_run_config(script, map_env({{"PATH", "/usr/bin:/bin"}})).python_boot.empty());
  // --no-instrument, or a program that is not Python: torchrun's environment, nothing added
  a.set("--no-instrument");
  RunConfig off = resolve_run_config(a, map_env({{"PATH", "/usr/bin:/bin"}}));
  EXPECT_TRUE(off.python_boot.empty());
  EXPECT_EQ(get(worker_env(off, 0, 0, map_env({})), "PYTHONPATH"), "(unset)");
  RunArgs sh;
  sh.command = {"/bin/sh", "-c", "true"};
  RunConfig shell = resolve_run_config(sh, map_env({}));
  EXPECT_TRUE(shell.python_boot.empty());
  EXPECT_EQ(get(worker_env(shell, 0, 0, map_env({})), "TRAINBOX_INSTRUMENT"), "(unset)");
}
