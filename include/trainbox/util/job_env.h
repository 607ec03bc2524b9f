// trainbox/util/job_env.h — the facts of a job's environment, parsed once for the launcher and the workers.
//
// `trainbox run` (launch/run_config.h) and the workers' WorkerEnv (distributed/worker_env.h) both read
// the scheduler's variables. They used to parse them separately and disagreed (for
// SLURM_JOB_NODELIST=n[1-2]-ib[3,4] one said n1, the other n1-ib3). Everything both need lives
// here, torch-free, pure and tested once (tests/unit/test_job_env.cpp):
//   - EnvLookup: how variables are read (the process environment, or a map in tests);
//   - Slurm hostlists with Slurm's own semantics (`scontrol show hostnames` is the reference):
//       "n[1-2]-ib[3,4]" → n1-ib3 n1-ib4 n2-ib3 n2-ib4   (bracket groups multiply, left slowest)
//       "x[007-009],login1" → x007 x008 x009 login1       (zero padding kept, commas at top level)
//     and SLURM_TASKS_PER_NODE's "2(x3),1" → 2 2 2 1;
//   - the master port every task of a Slurm job derives alike: 10000 + SLURM_JOB_ID % 50000;
//   - CUDA_VISIBLE_DEVICES: how many of the machine's GPUs a process would see.
// Numbers in them are read by util/parse.h. Errors are trainbox::UsageError naming the text
// (exit 2). Thread-safe (no state).
//
//   auto hosts = expand_hostlist("gpu[01-02]");            // {"gpu01", "gpu02"}
//   std::string master = first_host(*env("SLURM_JOB_NODELIST"));
//   int port = slurm_master_port(123456);                  // 33456
//   int n = visible_device_count("1,0", /*physical=*/4);   // 2
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox {

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();
EnvLookup map_env(std::map<std::string, std::string> vars);

// An elastic job's node range for its workers, "MIN:MAX": `trainbox run --nnodes MIN:MAX` sets
// it, WorkerEnv reads it, and `trainbox train` then keeps the job's global batch at every world
// size (docs/distributed.md, "Elastic jobs"). Unset in a fixed-size job.
inline constexpr const char* kElasticNnodesEnv = "TRAINBOX_ELASTIC_NNODES";

// MASTER_PORT when nothing says otherwise: torchrun's default, for the launcher (--master-port,
// launch/run_config.h) and for a worker that finds MASTER_ADDR but no MASTER_PORT
// (distributed/worker_env.h). The one place the number is written.
inline constexpr int kDefaultMasterPort = 29500;

// --- Slurm ---
// Expands a Slurm hostlist. Top-level commas (and blanks) separate entries; inside brackets,
// commas separate numbers and ranges "lo-hi" (the width of lo is kept: 007-009). Several
// bracket groups in one entry multiply, the leftmost varying slowest. Order and duplicates
// are kept, as scontrol does. Throws UsageError for unbalanced or nested brackets, a range
// going down, a non-number inside brackets, or more than kMaxHosts names: 65536, seven times
// the largest machines' node counts, and a bound on the work a malformed list can cause (a
// million names took seconds; tests/fuzz/corpus/hostlist/regress_timeout_many_names).
inline constexpr std::size_t kMaxHosts = 1 << 16;
std::vector<std::string> expand_hostlist(std::string_view list);
// The first name of expand_hostlist(list), without expanding the rest. Throws like it, and
// for an empty list.
std::string first_host(std::string_view list);
// SLURM_TASKS_PER_NODE / SLURM_NTASKS_PER_NODE: "2(x3),1" → {2, 2, 2, 1}; "8" → {8}.
std::vector<int> expand_tasks_per_node(std::string_view text);
// The MASTER_PORT every task of Slurm job `job_id` derives without talking to the others:
// 10000 + job_id % 50000. 10000–59999 stays clear of well-known ports.
int slurm_master_port(long long job_id);

// --- GPUs ---
// How many of `physical` GPUs a CUDA process sees under CUDA_VISIBLE_DEVICES (nullopt =
// unset: all of them), like torch.cuda.device_count(): entries are indices or GPU-/MIG-
// UUIDs; enumeration stops at the first entry that is neither a valid index nor a UUID
// ("-1", an index past the end, junk); a repeated index makes CUDA see none; "" sees none.
int visible_device_count(const std::optional<std::string>& cuda_visible_devices, int physical);

}  // namespace trainbox
