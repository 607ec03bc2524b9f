// trainbox/bench/report.h — benchmark results as nccl-tests-style tables and JSON, and
// every derived metric, each defined once.
//
// A BenchReport is `#` header lines describing the run (versions, devices, parameters)
// plus rows of named columns; render() prints fixed-width columns, to_json() the same
// rows. Torch-free.
// Live (a FILE* given to the constructor: `trainbox bench` on a console or a pipe): the `#`
// lines and the column row are printed when columns() is called, each row as it is added
// (flushed), the footers by finish(); a benchmark that takes minutes shows its progress. The
// live table's columns are at least kLiveWidth wide (the widths of the rows to come are not
// known yet). render() and to_json() still hold the whole report.
//
//   BenchReport r("gemm");
//   r.header("device", "cuda:0 (NVIDIA H200)");
//   r.columns({"dtype", "m", "n", "k", "time_us", "tflops"});
//   r.add({"bf16", 8192, 8192, 8192, 1391.2, tflops_gemm(8192, 8192, 8192, 1391.2e-6)});
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainbox::bench {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kReduce };

// Algorithm bandwidth: bytes / time, in GB/s (1 GB = 1e9 B), as nccl-tests.
double algbw_gbps(double bytes, double seconds);
// nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n; reduce_scatter, all_gather,
// alltoall (n-1)/n; broadcast, reduce 1. busbw is comparable to the hardware's link speed.
double busbw_factor(Collective c, int ranks);
double busbw_gbps(Collective c, double bytes, double seconds, int ranks);
// Dense matrix product m×k · k×n: 2·m·n·k floating-point operations.
double tflops_gemm(std::int64_t m, std::int64_t n, std::int64_t k, double seconds);
// Copy bandwidth counting each byte once (host↔device) — GB/s.
double copy_gbps(double bytes, double seconds);
// What fraction of a reference figure a measurement reaches, in percent.
double percent_of(double measured, double reference);

struct Stats {
  double median = 0, min = 0, max = 0;  // seconds
};
Stats summarize(std::vector<double> seconds);

class BenchReport {
 public:
  static constexpr std::size_t kLiveWidth = 10;
  explicit BenchReport(std::string name, std::FILE* live = nullptr);
  void header(const std::string& key, const std::string& value);
  void columns(std::vector<std::string> names);
  void add(std::vector<nlohmann::json> row);  // one value per column
  void footer(const std::string& line);       // e.g. "# Avg bus bandwidth : 12.3"
  // A correctness pass failed: the report renders a "# CHECK FAILED: why" footer, its JSON
  // has "failed": true and "failures", and `trainbox bench` exits 1.
  void fail(const std::string& why);
  bool failed() const { return !failures_.empty(); }
  const std::vector<std::string>& failures() const { return failures_; }

  std::string render() const;  // "# key: value" lines, header row, fixed-width rows, footers
  // Live: prints what render() would print after the last row (the footers) and a blank line.
  void finish() const;
  bool live() const { return live_ != nullptr; }
  nlohmann::json to_json()
      const;  // {"bench", "header": {...}, "rows": [{col: value}...], "footer": [...], "failed", "failures"}
  const std::string& name() const { return name_; }
  std::size_t rows() const { return rows_.size(); }

 private:
  std::string name_;
  std::vector<std::pair<std::string, std::string>> header_;
  std::vector<std::string> columns_;
  std::vector<std::vector<nlohmann::json>> rows_;
  std::vector<std::string> footers_;
  std::vector<std::string> failures_;
  std::FILE* live_ = nullptr;
  bool live_started_ = false;  // the `#` lines and the column row are out
  std::vector<std::size_t> live_widths_;
};

// A cell as text: integers as is, floats with 2 decimals (6 significant digits when small).
std::string format_cell(const nlohmann::json& v);

}  // namespace trainbox::bench
