// trainbox/distributed/process_group.h — a c10d process group from a WorkerEnv, in one call.
//
// Builds PyTorch's own c10d pieces: a TCPStore (rank 0 hosts it; under an agent store —
// TORCHELASTIC_USE_AGENT_STORE=True — every rank is a client under /worker/attempt_<n>, as
// with torchrun), then ProcessGroupNCCL on CUDA (device = local rank, set first) or
// ProcessGroupGloo on CPU. Before returning, every rank checks in through the store, so a
// missing peer is an error naming the address waited on and the ranks that never came,
// not a hang. Every collective has the group's timeout. Shut down cleanly on destruction.
// All ranks must call init() and each collective, in the same order.
// Process-wide settings NCCL reads from the environment (TORCH_NCCL_BLOCKING_WAIT,
// NCCL_SOCKET_IFNAME) are the program's to make, before init(): train/process_setup.h.
// Gloo is bound to the address that routes to MASTER_ADDR through its own device options.
//
//   auto pg = ProcessGroup::init(WorkerEnv::from_environment(), {.timeout = std::chrono::seconds(60)});
//   pg->allreduce(t, /*average=*/true);
//   pg->barrier();
#pragma once
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/types.h>

#include <trainbox/distributed/worker_env.h>

namespace trainbox::dist {

struct ProcessGroupOptions {
  std::string backend = "auto";                                 // auto (nccl on CUDA, gloo on CPU), gloo, nccl
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // store connect, check-in and every collective
};

// What this rank's collectives cost since the last take_comm_stats(): counted by every
// collective issued through this class (not through backend() directly). payload_bytes: the
// bytes handed in (an allreduce's tensor, a reduce-scatter's input, an all-gather's output);
// sent_bytes: what the bandwidth-optimal (ring) algorithm sends from each rank for them —
// allreduce 2(N-1)/N·B, reduce-scatter and all-gather (N-1)/N·B, broadcast (N-1)/N·B — the
// model the wire counters (/proc/net/dev) are compared against; wait_seconds: time blocked
// in wait(), i.e. communication not hidden behind compute.
struct CommStats {
  std::int64_t collectives = 0, payload_bytes = 0, sent_bytes = 0;
  double wait_seconds = 0;
};

class ProcessGroup {
 public:
  // device: where tensors live (selects the backend for "auto"; CUDA: cuda:<local_rank>).
  static std::shared_ptr<ProcessGroup> init(const WorkerEnv& env, const ProcessGroupOptions& o = {},
                                            torch::Device device = torch::kCPU);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend_name() const { return backend_name_; }
  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

  // Asynchronous sum (average: a true average on every backend; Gloo has no AVG, so sum
  // then divide in finish_average()).
  c10::intrusive_ptr<c10d::Work> allreduce_async(at::Tensor& t, bool average);
  // After waiting on an allreduce_async(average = true) result: completes the average.
  void finish_average(at::Tensor& t) const;
  void allreduce(at::Tensor& t, bool average);
  void allreduce_op(at::Tensor& t, c10d::ReduceOp op);  // SUM, MIN, MAX, … (waits)
  // Sharded training (distributed/ddp.h, zero_stage): `out` (numel = in.numel() / size())
  // receives this rank's slice of the sum (average: finish_average(out) after the wait) of
  // `in` over the ranks; `out` may be `in`'s own slice (in place). NCCL: ncclReduceScatter
  // (_reduce_scatter_base). Gloo: point-to-point — slice j of `in` sent to rank j, this
  // rank's slice received from every peer and added to its own when the work is waited on:
  // (N-1)/N of `in` sent, as a ring reduce-scatter, and faster than Gloo's own reduce_scatter
  // or an allreduce here (docs/distributed.md "Sharding (ZeRO)"). At 2 ranks the peer's slice
  // lands in `out` itself (no buffer); at N > 2 an (N-1)/N-sized buffer lives until the wait.
  // native = true forces _reduce_scatter_base on Gloo too (tests of that path).
  c10::intrusive_ptr<c10d::Work> reduce_scatter_async(at::Tensor& out, at::Tensor& in, bool average,
                                                      bool native = false);
  // After waiting on reduce_scatter_async: completes an average (Gloo has no AVG).
  void reduce_scatter_result(at::Tensor& out, const at::Tensor& in, bool average, bool native = false) const;
  // `out` (numel = in.numel() * size()) receives every rank's `in`, in rank order. NCCL:
  // _allgather_base (ncclAllGather), `in` may alias out's own slice. Gloo: point-to-point
  // into out's slices ((N-1)/N of `out` sent, as a ring), `in` may alias out's own slice too.
  c10::intrusive_ptr<c10d::Work> allgather_async(at::Tensor& out, at::Tensor& in);
  bool native_reduce_scatter() const { return native_avg_; }  // NCCL
  void broadcast(at::Tensor& t, int root = 0);
  void barrier();
  void shutdown();
  // Waits for an asynchronous collective of this group; a failure or timeout becomes a
  // DistError naming this rank, `what`, the backend and the store address. On NCCL this
  // blocks the host only with TORCH_NCCL_BLOCKING_WAIT=1 in the environment when init() ran
  // (train::configure_process() sets it; this class changes no environment): then a timed-out
  // or failed collective is an exception here rather than a watchdog abort.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);

  // The counters above, and a reset (thread-safe: DDP's hooks issue from autograd's threads).
  CommStats comm_stats() const;
  CommStats take_comm_stats();
  // For collectives issued on backend() directly: count one of `payload` bytes whose ring
  // algorithm sends `ring_factor`·payload from each rank (e.g. 2(N-1)/N for an allreduce).
  void count_collective(std::int64_t payload, double ring_factor);
  double allreduce_ring_factor() const { return size_ > 1 ? 2.0 * (size_ - 1) / size_ : 0.0; }
  double gather_ring_factor() const { return size_ > 1 ? double(size_ - 1) / size_ : 0.0; }

 private:
  ProcessGroup() = default;
  // Issues a collective and waits for it (wait()); an issue that throws is named the same way.
  void wait_for(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue);
  int next_p2p_tag();  // the same sequence on every rank: collectives are issued in the same order
  int rank_ = 0, size_ = 1;
  std::string backend_name_, where_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  bool native_avg_ = false;
  bool shut_ = false;
  mutable std::mutex stats_mu_;
  CommStats stats_;
  int p2p_tag_ = 0;  // under stats_mu_
};

}  // namespace trainbox::dist
