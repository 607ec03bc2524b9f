// trainbox bench NAME|all (names from the plugin registry, bench_plugins()): tables with `#` header
// lines, or --json with the same rows. A failed correctness pass exits 1.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "validators.h"
#include <trainbox/bench/command.h>
#include <trainbox/train/process_setup.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<bench::BenchCommand>();
  auto what = std::make_shared<std::string>();
  std::vector<std::string> choices = bench::bench_names();
  choices.push_back("all");
  std::string names;
  for (const auto& n : choices) names += (names.empty() ? "" : ", ") + n;
  app.add_option("what", *what, names)->required()->check(CLI::IsMember(choices));
  app.add_option("--device", a->device, "auto, cpu, cuda or cuda:N");
  app.add_flag("--quick", a->quick, "Small sweeps and few iterations (bench all --quick: the GPU check's set)");
  app.add_flag("--json", a->json, "The same rows as JSON (rank 0's, once, under a launcher)");
  app.add_flag("--no-check", a->no_check, "Skip the correctness passes");
  app.add_option("--iters", a->iters, "Timed iterations")->check(whole_number(1));
  app.add_option("--warmup", a->warmup, "Warm-up iterations")->check(whole_number(0));
  app.add_option("--sizes", a->sizes, bench::sizes_help() + " (K/M/G suffixes: 64K, 256M)")->transform(size_value());
  app.add_option("--dtypes", a->dtypes, bench::dtypes_help());
  // nccl-tests' flags for allreduce; sizes take K/M/G (1024-based) as nccl-tests does
  app.add_option("-b,--minbytes", a->ar.min_bytes, "allreduce: smallest size in bytes (8; e.g. 1K)")
      ->transform(size_value());
  app.add_option("-e,--maxbytes", a->ar.max_bytes, "allreduce: largest size in bytes (32M; e.g. 128M)")
      ->transform(size_value());
  app.add_option("-f,--stepfactor", a->ar.factor, "allreduce: size multiplier (2)");
  app.add_option("-n,--iterations", a->ar.iters, "allreduce: timed iterations (20)")->check(whole_number(1));
  app.add_option("-w,--warmup_iters", a->ar.warmup, "allreduce: warm-up iterations (5)")->check(whole_number(0));
  app.add_option("-c,--check", a->ar_check, "allreduce: check results (1) or not (0)")->check(CLI::IsMember({0, 1}));
  // bench dataloader on your own images (docs/datasets.md)
  app.add_option("--dataset", a->images.dataset,
                 "dataloader: imagefolder or webdataset (default: synthetic, in memory)")
      ->check(CLI::IsMember({"imagefolder", "webdataset"}));
  app.add_option("--path", a->images.path, "dataloader: the image folder's root, or the shards (brace ranges)");
  app.add_option("--batch", a->images.batch, "dataloader: images per batch (64)")->check(whole_number(1));
  app.add_option("--image-size", a->images.image_size, "dataloader: the training crop in pixels (224)")
      ->check(whole_number(8));
  app.add_option("--workers", a->images.workers, "dataloader: decode threads (0 = every core)")->check(whole_number(0));
  app.add_option("--epochs", a->images.epochs, "dataloader: epochs for the memory column (5)")->check(whole_number(1));
  // bench train on a job of your own (docs/benchmarks.md)
  app.add_option("--config", a->train.config, "train: a trainbox train TOML to measure instead of the built-in rows")
      ->check(CLI::ExistingFile);
  app.add_option("--set", a->train.overrides,
                 "train: override a key of that job (repeatable): --set train.batch_size=32 --set train.amp=bf16");
  return [a, what] {
    if (a->train.given() && *what != "train")
      throw UsageError("--config and --set apply to bench train, not " + *what,
                       "run trainbox bench train --config FILE");
    if (!a->images.dataset.empty() && a->images.path.empty())
      throw UsageError("--dataset " + a->images.dataset + " needs --path", "pass --path DIR (or the shard pattern)");
    if (!a->images.dataset.empty() && *what != "dataloader")
      throw UsageError("--dataset applies to bench dataloader, not " + *what, "run trainbox bench dataloader");
    train::configure_process();  // the process a training job gets (malloc, NCCL), as `trainbox train` does
    return bench::run_bench_command(*what, *a);
  };
}

}  // namespace trainbox::cli
