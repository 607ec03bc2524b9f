// trainbox/util/parse.h — one parser for the values people type: flags, environment variables, files.
//
// Every value that reaches trainbox as text (a CLI flag, a PET_* / TRAINBOX_* / SLURM_* / TORCHELASTIC_*
// variable, a --rdzv-conf item, an error file's timestamp, a prompt's token ids) is read here, so
// " 2 ", "TRUE" and "64K" mean the same wherever they are typed. Two layers:
//   - quiet cores, nullopt for text they do not accept: parse_integer, parse_real, parse_bool,
//     is_truthy / is_falsey — for callers with a message of their own or a fallback;
//   - checked forms taking a Given (the text and where it came from) that throw ParseError, a
//     UsageError (exit 2), in one shape: "<where and what was given>: must be <what is allowed>",
//     with the fix line "pass <what is allowed>" unless the caller has a better one:
//       "--master-port 70000: must be a whole number from 1 to 65535"
//       "PET_NNODES=x: must be a whole number from 1 to 65536"
//       "--rdzv-conf is_host=maybe: must be 1 or 0 (or true/false, yes/no, on/off)"
//     A CLI11 validator (tools/trainbox/validators.h) prints "--tokens: must be a whole number >= 1,
//     got '0'": CLI11 writes the flag's name itself; ParseError::allowed() gives the same words.
//
// What is accepted (decisions; blanks around the value are always allowed):
//   integers  an optional sign and at most 18 decimal digits (always fits a long long): no 1e3, 0x10, 1.0
//   numbers   decimal or scientific (1.5, 2e-3), finite: no hex, inf or nan
//   seconds   a number of seconds, at most 1e9 (32 years): no unit suffix ("30s", "5m" are refused,
//             as the CLI always did — a bare number cannot be misread as minutes)
//   sizes     a number with an optional K, M, G or T (powers of 1024, any case) and an optional
//             B or iB: "64K" = "64KB" = "64KiB" = 65536 (nccl-tests' -b/-e syntax), and "8GB" is
//             8 GiB = 8 x 2^30 bytes, never 8 x 10^9 (one rule for every size: GPU memory is sold
//             and reported in binary units); a fraction only with K, M, G or T ("1.5G", "0.5 GiB":
//             up to 18 decimals, rounded down to whole bytes; "1.5" and "1.5B" are refused); no
//             signs; at most 2^63 - 1
//   booleans  1/0, true/false, yes/no, on/off in any case (llama.cpp's is_truthy/is_falsey)
// Thread-safe (no state).
//
//   int port = static_cast<int>(parse_int(Given{"29500", "--master-port", true}, 1, 65535));
//   bool standalone = is_truthy(process_env()("PET_STANDALONE").value_or(""));   // util/job_env.h
//   std::int64_t max = parse_size(Given{"128M", "--maxbytes", true});   // 134217728
//   auto n = parse_integer(" -7 ");                                      // -7
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <trainbox/util/errors.h>

namespace trainbox {

// A value as it was given: errors show it as "--nnodes 0" (a flag) or "PET_NNODES=0" (a variable).
struct Given {
  std::string text;  // as typed
  std::string name;  // "--nnodes", "PET_NNODES", "--rdzv-conf join_timeout" …
  bool cli = false;  // a command-line flag (else an environment variable or a key)
  std::string shown() const;
};

// What the checked forms throw: "<given>: must be <allowed>" (exit 2).
class ParseError : public UsageError {
 public:
  ParseError(const Given& given, std::string allowed, std::string fix = {});
  const std::string& allowed() const noexcept { return allowed_; }  // "a whole number >= 1"

 private:
  std::string allowed_;
};

// --- quiet cores ---
// A whole decimal number: "42", " -7 ", "+3"; nullopt for "4x", "1.0", "", more than 18 digits.
std::optional<long long> parse_integer(std::string_view text);
// A finite decimal or scientific number: "1.5", " 2e-3 ", "-4"; nullopt for "0x10", "inf", "nan", "1,5".
std::optional<double> parse_real(std::string_view text);
// llama.cpp's rule: truthy 1/true/yes/on, falsey 0/false/no/off, any case, blanks around.
bool is_truthy(std::string_view text);
bool is_falsey(std::string_view text);
std::optional<bool> parse_bool(std::string_view text);  // nullopt: neither

// --- checked forms: ParseError naming the given value and what is allowed ---
inline constexpr long long kNoLimit = std::numeric_limits<long long>::max();
// A whole number in [lo, hi].
long long parse_int(const Given& v, long long lo, long long hi = kNoLimit, const std::string& fix = {});
// A number in [lo, hi], or (lo, hi] with lo_exclusive.
double parse_number(const Given& v, double lo, double hi = std::numeric_limits<double>::infinity(),
                    bool lo_exclusive = false, const std::string& fix = {});
// Seconds in [lo, 1e9].
inline constexpr double kMaxSeconds = 1e9;
double parse_seconds(const Given& v, double lo, const std::string& fix = {});
// A byte count (syntax above) of at least lo.
std::int64_t parse_size(const Given& v, std::int64_t lo = 0, const std::string& fix = {});
// 1/0, true/false, yes/no, on/off.
bool parse_bool(const Given& v, const std::string& fix = {});

}  // namespace trainbox
