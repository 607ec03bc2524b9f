// trainbox/distributed/compression.h — gradient compression for DistributedDataParallel:
// what is sent instead of the fp32 gradient bucket, and what that costs (torch-free).
//
// Methods (config key dist.grad_compression; docs/distributed.md, "Gradient compression"):
//   none      the fp32 bucket is all-reduced (plain DDP);
//   fp16/bf16 each bucket is divided by the world size, cast, all-reduced in 16 bits and cast
//             back: half the bytes (PyTorch's fp16_compress_hook / bf16_compress_hook);
//   powersgd  PyTorch's powerSGD_hook, per bucket: the bucket's 1-D tensors and the matrices not
//             worth compressing ((rows + cols)·rank·min_compression_rate >= rows·cols) are
//             all-reduced in one flat fp32 tensor; each other gradient M (viewed rows × rest) is
//             sent as its rank-r factors P = M·Q and Q = Mᵀ·P (two all-reduces), with error
//             feedback (what compression lost is added to the next step's gradient) and warm
//             start (Q kept from the last step). Before start_step synchronised steps, plain
//             fp32 all-reduce, as PyTorch's hook does.
// This header is the torch-free part — the options, their checks, and the byte counts that
// preflight, the benches and the summary use. The DDP applies it (distributed/ddp.h,
// DdpOptions::compression); its state per rank is DistributedDataParallel::compression_state().
//
//   CompressionOptions c;  c.method = parse_compression_method("powersgd");  c.rank = 4;
//   check_compression_options(c);                                   // ConfigError (exit 2)
//   auto est = estimate_compression({{768, 3072}, {3072}}, c);     // est.ratio() ≈ 150
//   DdpOptions o;  o.compression = c;                               // every rank the same
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::dist {

enum class CompressionMethod { kNone, kFp16, kBf16, kPowerSgd };
inline constexpr int kCompressionMethodCount = 4;

// "none" | "fp16" | "bf16" | "powersgd".
const char* compression_method_name(CompressionMethod m);
// Throws ConfigError naming the value and the four choices.
CompressionMethod parse_compression_method(std::string_view name);

// The defaults are PyTorch's PowerSGDState's (matrix_approximation_rank = 1,
// start_powerSGD_iter = 1000, min_compression_rate = 2, use_error_feedback = True,
// warm_start = True, random_seed = 0, orthogonalization_epsilon = 0), so a config ported from a
// Python job behaves the same.
struct CompressionOptions {
  CompressionMethod method = CompressionMethod::kNone;
  std::int64_t rank = 1;              // dist.powersgd.rank: columns of P and Q
  std::int64_t start_step = 1000;     // dist.powersgd.start_step: synchronised steps of plain all-reduce first
  double min_compression_rate = 2.0;  // dist.powersgd.min_compression_rate
  bool error_feedback = true;         // dist.powersgd.error_feedback (one gradient's worth of memory)
  bool warm_start = true;             // dist.powersgd.warm_start (keeps Q between steps)
  std::uint32_t seed = 0;             // PowerSGDState.random_seed: Q's initial draws (numpy RandomState)
  bool operator==(const CompressionOptions&) const = default;
};

// The option values on their own: rank >= 1, start_step >= 2 (PyTorch: "> 1"), a finite
// min_compression_rate > 0. ConfigError (exit 2) naming the key and the fix.
void check_compression_options(const CompressionOptions& c);
// With the model's gradient shapes (the trainable parameters'): powersgd needs some matrix
// (a tensor of 2 or more dimensions, viewed as shape[0] × the rest) whose smaller side is at
// least `rank`; a rank larger than the smaller side of every matrix is refused (ConfigError
// naming the largest smaller side). A rank larger than only some matrices' smaller side is
// fine: those are sent uncompressed, as PyTorch's hook does (it clips the rank to the smaller
// side, after which the compression test fails for any min_compression_rate >= 1).
void check_compression_for_shapes(const CompressionOptions& c, const std::vector<std::vector<std::int64_t>>& shapes);

// Whether powersgd compresses one gradient of this shape (PyTorch's _should_compress, with
// the rank clipped to the smaller side); 0-D and 1-D tensors never.
bool powersgd_compresses(const std::vector<std::int64_t>& shape, const CompressionOptions& c);

// What one synchronised step sends, per rank, for gradients of these shapes (fp32, or
// `element_bytes` each), as payload bytes handed to the all-reduces (the ring model's
// 2(N-1)/N applies to both alike, so the ratio is the wire's too). For powersgd after
// start_step; before it, and for none, compressed == uncompressed.
struct CompressionEstimate {
  std::int64_t uncompressed_bytes = 0;  // the fp32 all-reduce's payload
  std::int64_t compressed_bytes = 0;    // what the method hands to its all-reduces
  std::int64_t compressed_tensors = 0;  // powersgd: tensors sent as P and Q
  std::int64_t plain_tensors = 0;       // powersgd: tensors sent whole (1-D, small)
  double ratio() const { return compressed_bytes > 0 ? double(uncompressed_bytes) / double(compressed_bytes) : 1.0; }
};
CompressionEstimate estimate_compression(const std::vector<std::vector<std::int64_t>>& shapes,
                                         const CompressionOptions& c, int element_bytes = 4);

// One line: "powersgd (rank 4, from step 1000, min rate 2, error feedback, warm start)".
std::string describe_compression(const CompressionOptions& c);
// The settings as integers, identical on ranks that agree (for comparing ranks at start-up).
std::vector<std::int64_t> compression_signature(const CompressionOptions& c);

}  // namespace trainbox::dist
