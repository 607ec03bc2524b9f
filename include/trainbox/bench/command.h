// trainbox/bench/command.h — what `trainbox bench WHAT` does, callable from any program:
// picks the device, runs the chosen plugins (allreduce on the launcher's process group,
// or a world of one), prints rank 0's tables or JSON, returns 1 if a correctness pass failed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <trainbox/bench/bench.h>

namespace trainbox::bench {

struct BenchCommand {
  std::string device = "auto";
  bool quick = false, json = false, no_check = false;
  int iters = -1, warmup = -1;
  std::vector<std::int64_t> sizes;
  std::vector<std::string> dtypes;
  AllreduceOptions ar;
  int ar_check = 1;
  ImageLoaderOptions images;
  TrainBenchOptions train;
};

// what: a name from bench_names(), or all.
int run_bench_command(const std::string& what, const BenchCommand& c);
// The benchmarks' names, in the order `bench all` runs them (from bench_plugins()).
std::vector<std::string> bench_names();
// The help of --sizes and --dtypes, from the plugins that take them:
// "gemm: square sizes; attention: sequence lengths; memcpy: bytes", "gemm: fp32 tf32 bf16 fp16".
std::string sizes_help();
std::string dtypes_help();

}  // namespace trainbox::bench
