// trainbox bench {gemm, memcpy, allreduce, train, dataloader, all}: tables with `#` header
// lines, or --json with the same rows. A failed correctness pass exits 1.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include <trainbox/bench/command.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<bench::BenchCommand>();
  auto what = std::make_shared<std::string>();
  app.add_option("what", *what, "gemm, memcpy, allreduce, train, dataloader or all")
      ->required()
      ->check(CLI::IsMember({"gemm", "memcpy", "allreduce", "train", "dataloader", "all"}));
  app.add_option("--device", a->device, "auto, cpu, cuda or cuda:N");
  app.add_flag("--quick", a->quick, "Small sweeps and few iterations (bench all --quick: the GPU check's set)");
  app.add_flag("--json", a->json, "The same rows as JSON");
  app.add_flag("--no-check", a->no_check, "Skip the correctness passes");
  app.add_option("--iters", a->iters, "Timed iterations")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a->warmup, "Warm-up iterations")->check(CLI::NonNegativeNumber);
  app.add_option("--sizes", a->sizes, "gemm: square sizes; memcpy: bytes")->check(CLI::PositiveNumber);
  app.add_option("--dtypes", a->dtypes, "gemm: fp32 tf32 bf16 fp16");
  // nccl-tests' flags for allreduce
  app.add_option("-b,--minbytes", a->ar.min_bytes, "allreduce: smallest size in bytes (8)")->check(CLI::PositiveNumber);
  app.add_option("-e,--maxbytes", a->ar.max_bytes, "allreduce: largest size in bytes (32 MiB)")->check(CLI::PositiveNumber);
  app.add_option("-f,--stepfactor", a->ar.factor, "allreduce: size multiplier (2)");
  app.add_option("-n,--iterations", a->ar.iters, "allreduce: timed iterations (20)")->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup_iters", a->ar.warmup, "allreduce: warm-up iterations (5)")->check(CLI::NonNegativeNumber);
  app.add_option("-c,--check", a->ar_check, "allreduce: check results (1) or not (0)")->check(CLI::Range(0, 1));
  return [a, what] { return bench::run_bench_command(*what, *a); };
}

}  // namespace trainbox::cli
