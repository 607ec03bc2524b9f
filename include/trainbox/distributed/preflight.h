// trainbox/distributed/preflight.h — `trainbox preflight`: before a multi-node job, under the same
// launcher, check that the nodes can train together. Every rank:
//   1. collects its node's facts (env/preflight.h: torch, CUDA runtime, NCCL, driver, GPU model
//      and count, /dev/shm, interfaces, and the interface that routes to MASTER_ADDR);
//   2. checks that it can reach MASTER_ADDR:MASTER_PORT ("node 1 (n2) cannot reach
//      198.18.0.1:29500: no answer within 20 s");
//   3. joins the job's process group and posts its facts in the store;
//   4. runs a smoke allreduce (NCCL on GPUs, Gloo on CPU) and posts OK or why it broke; on GPUs
//      with NCCL's INIT/NET log captured (env/nccl_log.h), so it knows the transport NCCL chose;
//   5. on any backend, the first rank of each node measures TCP bandwidth and latency to the
//      other nodes (env/link_test.h: all pairs up to 8 nodes, ring neighbours beyond), one pair at
//      a time, about 10 s in all.
// Rank 0 prints one line per node, the interface each uses, the transport per node ("transport
// node 1 (n2): NET/IB with GPUDirect RDMA (mlx5_0:1/IB, …)"), every fact that differs between
// nodes (naming the nodes and the values), one line per link, a warning for each node whose
// every link is far slower than the typical node's best link (a slow NIC: "slow node: node 2
// (n3): at most 0.00497 GB/s on each of its 2 links, 227× slower than …") and for each other
// link far slower than it (env/preflight.h judge_links), and one line per rank: `host:rank N OK`
// or `host:rank N broken: why`. A node that fell back to NCCL's socket transport while its HCAs
// are active is an error, with the doctor's
// fabric findings as the likely cause. With `json`, the same facts as one JSON object per job
// ({"ok", "nodes": [...], "links": [...], ...}) for a scheduler prologue to gate on, through
// util/result_file.h: under `trainbox run` the launcher prints it once, unprefixed.
// Returns 0 when the nodes agree and every rank is OK, else 1.
// Every wait is bounded by `timeout`. Run it under any launcher (a single process checks itself):
//   trainbox run --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint n1:29400 -- trainbox preflight
// With the job's model (`trainbox preflight --config FILE`: its gradient shapes, one measured
// step, its dist.grad_compression settings), the link finding also says whether the slowest
// link makes this model's step mostly communication, and then names the key that would help
// with its ratio for this model, or that the link is fast and compression should stay off
// (distributed/link_advice.h; JSON "compression_advice").
#pragma once
#include <chrono>
#include <cstdio>
#include <optional>

#include <trainbox/distributed/link_advice.h>

namespace trainbox::dist {

struct PreflightOptions {
  std::chrono::seconds timeout{30};       // reaching the master, the store, the smoke allreduce
  bool json = false;                      // rank 0 prints one JSON object instead of the text
  bool links = true;                      // the pairwise TCP bandwidth/latency test between nodes
  double slow_link_factor = 5;            // a node or link under the reference / factor is named
  double expected_link_gbytes_per_s = 0;  // > 0: the reference rate; 0: the typical node's best link
  // Capture NCCL's INIT/NET log during the smoke allreduce (sets NCCL_DEBUG, NCCL_DEBUG_SUBSYS
  // and NCCL_DEBUG_FILE for this process until preflight returns; see env/nccl_log.h).
  bool capture_nccl_log = true;
  // The job's model (train/preflight_model.h fills it); world and link rate are preflight's.
  std::optional<LinkAdviceInputs> model;
};

int run_preflight(const PreflightOptions& o = {}, std::FILE* out = stdout);

}  // namespace trainbox::dist
