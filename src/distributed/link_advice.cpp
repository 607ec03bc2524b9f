#include <trainbox/distributed/link_advice.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/util/strings.h>

namespace trainbox::dist {

namespace {

// 10 %: below it the whole exchange is at most a tenth of the step, so no method can win more,
// and compression costs compute (the casts, PowerSGD's products) and, for PowerSGD, accuracy.
constexpr double kFastFraction = 0.1;

std::string seconds(double s) { return s >= 0.1 ? fmt::format("{:.2f} s", s) : fmt::format("{:.1f} ms", s * 1e3); }

}  // namespace

LinkAdvice advise_compression(const LinkAdviceInputs& in) {
  LinkAdvice a;
  if (in.world < 2 || in.link_gbytes_per_s <= 0) return a;
  CompressionOptions none;
  const CompressionEstimate plain = estimate_compression(in.shapes, none);
  const double ring = 2.0 * (in.world - 1) / in.world;
  a.fp32_bytes = static_cast<std::int64_t>(ring * double(plain.uncompressed_bytes) + 0.5);
  a.fp32_exchange_s = double(a.fp32_bytes) / (in.link_gbytes_per_s * 1e9);
  CompressionOptions p = in.configured;
  p.method = CompressionMethod::kPowerSgd;
  if (in.configured.method != CompressionMethod::kPowerSgd) p.rank = 4;  // the rank the docs start tuning from
  CompressionOptions b;
  b.method = CompressionMethod::kBf16;
  for (const auto& [c, setting] :
       {std::pair{p, fmt::format("dist.grad_compression = \"powersgd\" with dist.powersgd.rank = {}", p.rank)},
        std::pair{b, std::string("dist.grad_compression = \"bf16\"")}}) {
    const double ratio = estimate_compression(in.shapes, c).ratio();
    a.choices.push_back({setting, ratio, a.fp32_exchange_s / ratio});
  }
  const double frac = in.compute_s > 0 ? a.fp32_exchange_s / in.compute_s : 1e9;
  a.verdict = frac >= 1               ? LinkVerdictKind::kSlow
              : frac <= kFastFraction ? LinkVerdictKind::kFast
                                      : LinkVerdictKind::kBetween;
  const std::string head = fmt::format(
      "{}'s fp32 gradient exchange ({} a step per rank) takes {} over the slowest link ({:.3g} GB/s) against {} of "
      "compute",
      in.model, human_bytes(static_cast<std::uint64_t>(a.fp32_bytes)), seconds(a.fp32_exchange_s), in.link_gbytes_per_s,
      seconds(in.compute_s));
  const auto& ps = a.choices[0];
  const auto& bs = a.choices[1];
  switch (a.verdict) {
    case LinkVerdictKind::kSlow:
      a.line = fmt::format(
          "slow link for this model: {}; set {} ({:.0f}x fewer bytes for this model, about {}) or {} ({:.1f}x, about "
          "{}; no accuracy cost to speak of)",
          head, ps.setting, ps.ratio, seconds(ps.exchange_s), bs.setting, bs.ratio, seconds(bs.exchange_s));
      break;
    case LinkVerdictKind::kFast:
      a.line = fmt::format(
          "fast link for this model: {} ({:.0f} %); leave dist.grad_compression = \"none\": compression would cost "
          "compute (and, for PowerSGD, accuracy) to win at most {:.0f} % of the step",
          head, 100 * frac, 100 * frac / (1 + frac));
      break;
    case LinkVerdictKind::kBetween:
      a.line = fmt::format(
          "link and compute about even for this model: {} ({:.0f} %); {} would shorten a step by at most {:.0f} % "
          "(measure it: trainbox bench allreduce_compressed)",
          head, 100 * frac, ps.setting, 100 * (frac - frac / ps.ratio) / (1 + frac));
      break;
  }
  return a;
}

nlohmann::json link_advice_json(const LinkAdvice& a, const LinkAdviceInputs& in) {
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& c : a.choices)
    choices.push_back({{"setting", c.setting}, {"ratio", c.ratio}, {"exchange_s", c.exchange_s}});
  const char* v = a.verdict == LinkVerdictKind::kSlow   ? "slow"
                  : a.verdict == LinkVerdictKind::kFast ? "fast"
                                                        : "between";
  return {{"verdict", v},
          {"model", in.model},
          {"fp32_bytes_per_step", a.fp32_bytes},
          {"fp32_exchange_s", a.fp32_exchange_s},
          {"compute_s", in.compute_s},
          {"link_gbytes_per_s", in.link_gbytes_per_s},
          {"configured", describe_compression(in.configured)},
          {"choices", choices},
          {"line", a.line}};
}

}  // namespace trainbox::dist
