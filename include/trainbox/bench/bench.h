// trainbox/bench/bench.h — `trainbox bench`: how fast is this box.
//
// One shared driver (time_op: warm-up, then each iteration timed on its own — CUDA events
// on the GPU, the host clock on CPU — with nothing else inside the timed region; median,
// min and max) and one small plugin per benchmark. Correctness passes run apart from the
// timed loops. Each plugin returns a BenchReport (report.h): `#` lines describing the run,
// rows as a table or JSON.
//
//   BenchOptions o; o.device = torch::kCUDA; o.quick = true;
//   std::cout << bench_gemm(o).render();
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include <trainbox/bench/report.h>

namespace trainbox::env {
class NcclLogCapture;  // env/nccl_log.h
}

namespace trainbox::dist {
class ProcessGroup;
}

namespace trainbox::bench {

// nccl-tests' flags: -b min bytes, -e max bytes, -f factor, -n iters, -w warmup, -c check.
struct AllreduceOptions {
  std::int64_t min_bytes = 8, max_bytes = 32 << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  bool check = true;
  torch::ScalarType dtype = torch::kFloat32;
  // NCCL's log, captured since before the process group (its transport goes in a `# transport` header).
  const env::NcclLogCapture* nccl_log = nullptr;
};

// bench dataloader on your own images (--dataset imagefolder|webdataset --path …): the
// training transform at `image_size`, batches of `batch`, `workers` decode threads (0: the cores).
struct ImageLoaderOptions {
  std::string dataset, path;  // empty dataset: the synthetic in-memory pipeline
  std::int64_t batch = 64, image_size = 224, workers = 0, epochs = 5;
};

// bench train on a job of your own (--config FILE, --set KEY=VALUE): its model, data, optimizer
// and amp, one process, instead of the built-in rows (mlp, cnn, gpt).
struct TrainBenchOptions {
  std::string config;                  // a trainbox train TOML; empty: the built-in defaults (with --set)
  std::vector<std::string> overrides;  // KEY=VALUE, applied after the file
  bool given() const { return !config.empty() || !overrides.empty(); }
};
struct BenchOptions {
  torch::Device device = torch::kCPU;
  bool quick = false;  // small sweep, few iterations (what scripts/gpu-check.sh runs)
  int warmup = 5, iters = 20;
  bool check = true;                // correctness pass
  std::vector<std::int64_t> sizes;  // gemm: square sizes; attention: sequence lengths; memcpy: bytes (empty: defaults)
  std::vector<std::string> dtypes;  // gemm: fp32 tf32 bf16 fp16 (empty: all the device supports)
  AllreduceOptions allreduce;       // collective benchmarks
  ImageLoaderOptions images;        // dataloader: an image folder or shards instead of synthetic data
  TrainBenchOptions train;          // train: a job's config instead of the built-in rows
  dist::ProcessGroup* group = nullptr;               // set for collective benchmarks (every rank runs them)
  std::shared_ptr<dist::ProcessGroup> shared_group;  // the same group, for what must share it (a DDP)
  // Where a plugin prints its table live, row by row (BenchReport's live mode): stdout for a
  // text report on rank 0, null for --json (one document at the end) and other ranks.
  std::FILE* live = nullptr;
};

// One benchmark, in the manner of nccl-tests' per-collective engine: each plugin file
// defines its entry (kGemmBench in gemm.cpp, …); bench_plugins() lists them in the order
// `bench all` runs them, and everything else (the CLI's choices, its help) derives from it.
struct BenchPlugin {
  const char* name;
  const char* summary;
  bool collective;  // every rank runs it on the job's process group; otherwise rank 0 alone
  BenchReport (*run)(const BenchOptions&);
  const char* sizes = nullptr;                     // what --sizes means for it ("square sizes"); null: none
  std::vector<std::string> (*dtypes)() = nullptr;  // the --dtypes it takes (its dtype table's names); null: none
  // Under a launcher, whether every rank runs it (not only rank 0) although it is not collective
  // on the bench's group: a job that makes its own process group (bench train of a data-parallel
  // job). Rank 0 reports. Null: rank 0 alone.
  bool (*every_rank)(const BenchOptions&) = nullptr;
};
const std::vector<const BenchPlugin*>& bench_plugins();

// Runs fn `warmup` times, then `iters` times, each timed alone. Seconds.
Stats time_op(const std::function<void()>& fn, const torch::Device& device, int warmup, int iters);

// Versions and devices for the `#` header lines.
void describe_run(BenchReport& r, const torch::Device& device);

// Why `dtype` ("bf16", "fp16") is emulated on `device` — converted to fp32 element by element,
// a 2048^3 bf16 product at 0.001 TFLOP/s on a CPU without AVX-512 BF16 — or "" when it runs
// natively there (any CUDA device; a CPU whose flags are unknown counts as native: util/cpu_features.h).
std::string emulated_reason(const std::string& dtype, const torch::Device& device);

// The sizes a plugin measures: --sizes when given, else its defaults for --quick or for a full run.
std::vector<std::int64_t> sizes_or(const BenchOptions& o, std::vector<std::int64_t> quick,
                                   std::vector<std::int64_t> full);

BenchReport bench_gemm(const BenchOptions& o);
BenchReport bench_memcpy(const BenchOptions& o);

// Collective over `pg` (every rank calls it; rank 0's report is the one to print).
BenchReport bench_allreduce(const AllreduceOptions& o, dist::ProcessGroup& pg, const torch::Device& device);
// Elements of `got` that differ from `expected` by more than tol·|expected| (the #wrong column).
std::int64_t count_wrong(const torch::Tensor& got, const torch::Tensor& expected, double tol);

// One DDP gradient exchange of a GPT-shaped set of gradients per dist.grad_compression method
// (--dtypes: methods, --sizes: PowerSGD ranks); collective, on o.shared_group.
BenchReport bench_allreduce_compressed(const BenchOptions& o);

BenchReport bench_train(const BenchOptions& o);
BenchReport bench_dataloader(const BenchOptions& o);
BenchReport bench_heartbeat(const BenchOptions& o);

}  // namespace trainbox::bench
