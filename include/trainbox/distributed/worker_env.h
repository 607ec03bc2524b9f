// trainbox/distributed/worker_env.h — who am I in the job? Read from the launcher's environment.
//
// Understands torchrun's contract (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), so workers run under
// `trainbox run`, real torchrun and Kubernetes PyTorchJobs; Slurm's srun variables
// (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID, SLURM_JOB_NODELIST); and
// falls back to a single process. Torch-free. Slurm's hostlist, task counts and port formula
// come from util/job_env.h, the same code `trainbox run` uses; numbers and booleans are read
// by util/parse.h. Which launcher was found is decided once, here, as a WorkerSource.
//
//   WorkerEnv env = WorkerEnv::from_environment();     // throws UsageError if inconsistent
//   if (env.distributed()) { auto pg = ProcessGroup::init(env); … }   // distributed/process_group.h
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <trainbox/util/job_env.h>

namespace trainbox::dist {

// Who started this process: torchrun's contract (also `trainbox run` and Kubernetes), srun, or
// nobody (a single process).
enum class WorkerSource { kSingle, kTorchrun, kSlurm };
std::string_view source_name(WorkerSource s);  // "single", "torchrun", "slurm"

struct WorkerEnv {
  int rank = 0, local_rank = 0, world_size = 1, local_world_size = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;  // util/job_env.h (torchrun's 29500)
  int restart_count = 0;
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: the agent hosts the store
  WorkerSource source = WorkerSource::kSingle;
  // An elastic job's node range, TRAINBOX_ELASTIC_NNODES=MIN:MAX (`trainbox run --nnodes
  // MIN:MAX` sets it; torchrun has no such variable): 0 = a fixed world.
  int nnodes_min = 0, nnodes_max = 0;

  bool distributed() const { return world_size > 1; }
  bool elastic() const { return nnodes_max > 0; }
  static WorkerEnv from_environment();
  // The same, reading variables through `get` (tests).
  static WorkerEnv from(const std::function<std::optional<std::string>(const std::string&)>& get);
};

}  // namespace trainbox::dist
