// Gradient compression: the options, their checks and the byte counts (torch-free;
// trainbox/distributed/compression.h). The DDP's compressor is grad_compressor.cpp.
#include <trainbox/distributed/compression.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::dist {

namespace {
constexpr std::array<const char*, kCompressionMethodCount> kNames = {"none", "fp16", "bf16", "powersgd"};
static_assert(static_cast<int>(CompressionMethod::kPowerSgd) + 1 == kCompressionMethodCount);

// A gradient as PyTorch's hook views it: shape[0] rows × the product of the rest.
std::pair<std::int64_t, std::int64_t> as_matrix(const std::vector<std::int64_t>& shape) {
  if (shape.size() < 2) return {0, 0};
  std::int64_t cols = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  return {shape[0], cols};
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}
}  // namespace

const char* compression_method_name(CompressionMethod m) { return kNames[static_cast<std::size_t>(m)]; }

CompressionMethod parse_compression_method(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (name == kNames[i]) return static_cast<CompressionMethod>(i);
  throw ConfigError(fmt::format("dist.grad_compression = \"{}\" is not a compression method", name),
                    "use none, fp16, bf16 or powersgd (docs/distributed.md, \"Gradient compression\")");
}

void check_compression_options(const CompressionOptions& c) {
  if (c.method != CompressionMethod::kPowerSgd) return;
  if (c.rank < 1)
    throw ConfigError(
        fmt::format("dist.powersgd.rank = {} is not allowed: the rank of the approximation is >= 1", c.rank),
        "set dist.powersgd.rank to 1, 2, 4 … (PyTorch's default is 1; 4 is a common choice)");
  if (c.start_step <= 1)
    throw ConfigError(
        fmt::format("dist.powersgd.start_step = {} is not allowed: PowerSGD starts after at least 2 plain steps",
                    c.start_step),
        "set dist.powersgd.start_step >= 2 (PyTorch's rule; its default is 1000, about 10 % of the steps is advised)");
  if (!std::isfinite(c.min_compression_rate) || c.min_compression_rate <= 0)
    throw ConfigError(fmt::format("dist.powersgd.min_compression_rate = {} is not allowed: it is a positive ratio",
                                  c.min_compression_rate),
                      "set dist.powersgd.min_compression_rate to a number > 0 (PyTorch's default is 2)");
}

bool powersgd_compresses(const std::vector<std::int64_t>& shape, const CompressionOptions& c) {
  const auto [rows, cols] = as_matrix(shape);
  if (rows == 0 || cols == 0) return false;
  const std::int64_t r = std::min({rows, cols, c.rank});
  return double((rows + cols) * r) * c.min_compression_rate < double(rows * cols);
}

void check_compression_for_shapes(const CompressionOptions& c, const std::vector<std::vector<std::int64_t>>& shapes) {
  check_compression_options(c);
  if (c.method != CompressionMethod::kPowerSgd) return;
  std::int64_t widest = 0;  // the largest smaller side of any matrix
  for (const auto& s : shapes) {
    const auto [rows, cols] = as_matrix(s);
    widest = std::max(widest, std::min(rows, cols));
  }
  if (widest == 0)
    throw ConfigError(
        "dist.grad_compression = \"powersgd\" needs matrices, but this model's gradients are all 0-D or 1-D",
        "use dist.grad_compression = \"bf16\" (or none) for this model");
  if (c.rank > widest)
    throw ConfigError(
        fmt::format("dist.powersgd.rank = {} is larger than the smaller side of every matrix of this model "
                    "(the largest is {})",
                    c.rank, widest),
        fmt::format("set dist.powersgd.rank <= {} (1, 2 or 4 is typical)", widest));
}

CompressionEstimate estimate_compression(const std::vector<std::vector<std::int64_t>>& shapes,
                                         const CompressionOptions& c, int element_bytes) {
  CompressionEstimate e;
  for (const auto& s : shapes) {
    const std::int64_t bytes = numel(s) * element_bytes;
    e.uncompressed_bytes += bytes;
    switch (c.method) {
      case CompressionMethod::kNone: e.compressed_bytes += bytes; break;
      case CompressionMethod::kFp16:
      case CompressionMethod::kBf16: e.compressed_bytes += numel(s) * 2; break;
      case CompressionMethod::kPowerSgd:
        if (powersgd_compresses(s, c)) {
          const auto [rows, cols] = as_matrix(s);
          e.compressed_bytes += (rows + cols) * std::min({rows, cols, c.rank}) * element_bytes;
          ++e.compressed_tensors;
        } else {
          e.compressed_bytes += bytes;
          ++e.plain_tensors;
        }
        break;
    }
  }
  return e;
}

std::string describe_compression(const CompressionOptions& c) {
  if (c.method != CompressionMethod::kPowerSgd) return compression_method_name(c.method);
  return fmt::format("powersgd (rank {}, from step {}, min rate {}, {}error feedback, {}warm start)", c.rank,
                     c.start_step, c.min_compression_rate, c.error_feedback ? "" : "no ", c.warm_start ? "" : "no ");
}

std::vector<std::int64_t> compression_signature(const CompressionOptions& c) {
  std::int64_t rate_bits = 0;
  static_assert(sizeof(rate_bits) == sizeof(c.min_compression_rate));
  std::memcpy(&rate_bits, &c.min_compression_rate, sizeof(rate_bits));
  return {static_cast<std::int64_t>(c.method),
          c.rank,
          c.start_step,
          rate_bits,
          c.error_feedback ? 1 : 0,
          c.warm_start ? 1 : 0,
          std::int64_t(c.seed)};
}

}  // namespace trainbox::dist
