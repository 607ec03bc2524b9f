// trainbox/util/result_file.h — how a command hands its machine-readable result (`--json`) to
// whoever started it, without mixing it into the console.
//
// Under a launcher every rank's stdout is one console, prefixed "[rank N] " and shared with
// library chatter (NCCL_DEBUG=INFO writes to stdout), so JSON printed there cannot be parsed.
// The contract, one environment variable:
//   TRAINBOX_RESULT_FILE=<path>  set by the parent (trainbox run, doctor --smoke) for a child.
//   - Only rank 0 produces a result; other ranks produce nothing.
//   - Set and non-empty: the result is written to <path> as compact JSON plus "\n", atomically
//     (a temporary file in the same folder, then rename), so a reader never sees half a
//     result. Nothing goes to stdout.
//   - Unset or empty: the result is printed to stdout, indented by 2 (a person is reading).
//   - A child that does not know the contract leaves <path> absent or empty; the parent then
//     has no result, which it must treat as "no result", not as an error in itself.
// `trainbox run` gives every worker its own <log_dir>/attempt_<n>/<rank>/result.json
// (overriding a TRAINBOX_RESULT_FILE the user exported: ranks must never share one file) and,
// when the job ends, passes rank 0's result of the last attempt on by the same rule — to its
// own $TRAINBOX_RESULT_FILE if set, else verbatim to stdout after all worker output — so
// `trainbox run … trainbox bench --json | jq` and nested parents both work.
//
// Call from one thread; write_result throws SystemError naming the path when it cannot write.
//   nlohmann::json j = {{"samples_per_s", 1234.5}};
//   trainbox::write_result(j, rank);                        // rank 0 only; file or stdout
//   auto r = trainbox::run_for_result({tool, "smoke", "--json"});
//   auto j = nlohmann::json::parse(r.result, nullptr, false); // r.out: its stdout, not shown
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <trainbox/util/process.h>

namespace trainbox {

inline constexpr const char* kResultFileEnv = "TRAINBOX_RESULT_FILE";

// Rank 0: the result to $TRAINBOX_RESULT_FILE (compact + "\n", atomically) or to stdout
// (indented by `indent`; -1: one line). Other ranks: nothing. Invalid UTF-8 in strings is
// replaced, never a throw.
void write_result(const nlohmann::json& result, int rank, int indent = 2);

// Passes on a result another program produced (the launcher relaying rank 0's): `text`
// verbatim to $TRAINBOX_RESULT_FILE (atomically) if set, else to stdout. Empty text: nothing.
void forward_result(std::string_view text);

// Writes `text` to `path` through <path>.tmp.<pid> and rename(2). Throws SystemError naming
// the path (the temporary file is removed).
void write_file_atomically(const std::string& path, std::string_view text);

struct ResultCapture : CaptureResult {
  std::string result;  // what the child wrote to its result file; "" when nothing
};

// run_capture() with TRAINBOX_RESULT_FILE set, for the child only, to a fresh temporary file
// in $TMPDIR (removed afterwards). stdout is captured in `out` (never shown); stderr is
// inherited. Throws SystemError when the temporary file cannot be created.
ResultCapture run_for_result(const std::vector<std::string>& argv);

}  // namespace trainbox
