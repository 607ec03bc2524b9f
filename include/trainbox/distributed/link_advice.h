// trainbox/distributed/link_advice.h — whether gradient compression would help this job on
// these links, and which key: `trainbox preflight --config`'s finding (torch-free arithmetic).
//
// Inputs: the model's trainable gradient shapes, one training step's compute seconds
// (measured by the caller: train/preflight_model.h), the world, the slowest measured link
// (a ring allreduce runs at its slowest link's rate) and the configured compression. The fp32
// exchange of a step is the ring's 2(N-1)/N · 4 · elements bytes over that link; each method's
// bytes are the compress module's estimate for these shapes (distributed/compression.h
// estimate_compression), PowerSGD at the configured rank, else 4.
// Verdicts (no overlap assumed: the worst case, what DDP shows when backward is short):
//   slow   exchange ≥ compute: the uncompressed step is mostly communication → name the key
//          (powersgd with its rank and ratio; bf16's 2× as the safe first step);
//   fast   exchange ≤ 10 % of compute → say not to use compression (at most 10 % to win,
//          while it costs compute and, for PowerSGD, accuracy);
//   either between: the bound on the gain, no recommendation.
//
//   LinkAdviceInputs in{shapes, /*compute_s=*/0.05, /*world=*/2, /*link=*/0.0125, "gpt", {}};
//   LinkAdvice a = advise_compression(in);   // a.verdict == LinkVerdictKind::kSlow; a.line
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <trainbox/distributed/compression.h>

namespace trainbox::dist {

struct LinkAdviceInputs {
  std::vector<std::vector<std::int64_t>> shapes;  // trainable gradients
  double compute_s = 0;                           // one step's forward + backward + optimizer, measured
  int world = 2;
  double link_gbytes_per_s = 0;   // the slowest measured link (1 GB = 1e9 B)
  std::string model;              // for the line: "gpt"
  CompressionOptions configured;  // dist.grad_compression and dist.powersgd.* of the config
};

enum class LinkVerdictKind { kSlow, kBetween, kFast };

struct CompressionChoice {
  std::string setting;  // `dist.grad_compression = "powersgd", dist.powersgd.rank = 4`
  double ratio = 1;     // fp32 bytes / its bytes, for this model
  double exchange_s = 0;
};

struct LinkAdvice {
  LinkVerdictKind verdict = LinkVerdictKind::kBetween;
  std::int64_t fp32_bytes = 0;  // sent per rank per step, ring model
  double fp32_exchange_s = 0;
  std::vector<CompressionChoice> choices;  // powersgd, bf16 (the order recommended)
  std::string line;                        // the finding, one line
};

// Throws nothing; a zero link rate or world < 2 gives kBetween with an empty line.
LinkAdvice advise_compression(const LinkAdviceInputs& in);
// {"verdict": "slow"|"between"|"fast", "fp32_bytes_per_step", "fp32_exchange_s", "compute_s",
//  "link_gbytes_per_s", "choices": [{"setting", "ratio", "exchange_s"}], "line"}
nlohmann::json link_advice_json(const LinkAdvice& a, const LinkAdviceInputs& in);

}  // namespace trainbox::dist
