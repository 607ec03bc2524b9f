// trainbox/dist/preflight.h — `trainbox preflight`: before a multi-node job, under the same
// launcher, check that the nodes can train together. Every rank:
//   1. collects its node's facts (env/preflight.h: torch, CUDA runtime, NCCL, driver, GPU model
//      and count, /dev/shm, interfaces, and the interface that routes to MASTER_ADDR);
//   2. checks that it can reach MASTER_ADDR:MASTER_PORT ("node 1 (n2) cannot reach
//      198.18.0.1:29500: no answer within 20 s");
//   3. joins the job's process group and posts its facts in the store;
//   4. runs a smoke allreduce (NCCL on GPUs, Gloo on CPU) and posts OK or why it broke.
// Rank 0 prints one line per node, the interface each uses, every fact that differs between
// nodes (naming the nodes and the values), and one line per rank: `host:rank N OK` or
// `host:rank N broken: why`. Returns 0 when the nodes agree and every rank is OK, else 1.
// Every wait is bounded by `timeout`. Run it under any launcher (a single process checks itself):
//   trainbox run --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint n1:29400 -- trainbox preflight
#pragma once
#include <chrono>
#include <cstdio>

namespace trainbox::dist {

struct PreflightOptions {
  std::chrono::seconds timeout{30};  // reaching the master, the store, the smoke allreduce
};

int run_preflight(const PreflightOptions& o = {}, std::FILE* out = stdout);

}  // namespace trainbox::dist
