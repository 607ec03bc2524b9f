// `trainbox doctor --from REPORT.json`: parse, diagnose, render as text and JSON. Property: a
// report it accepts survives its own JSON writer (doctor --json | doctor --from).
#include <cstdio>
#include <string>

#include "fuzz_common.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/env/render.h>
#include <trainbox/env/report.h>
#include <trainbox/util/errors.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainbox::env;
  static trainbox::fuzz::InputFile file;
  EnvReport r;
  try {
    r = read_report_file(file.write(data, size));  // the --from path: also unwraps {"report": …}
  } catch (const trainbox::Error&) {
    return 0;
  }
  auto findings = diagnose(r);
  (void)render_text(r, findings);
  (void)render_findings(findings, {true});
  const std::string json = doctor_json(r, findings).dump();
  try {
    EnvReport again = report_from_json(to_json_string(r));
    FUZZ_CHECK(to_json_string(again) == to_json_string(r));
  } catch (const trainbox::Error& e) {
    std::fprintf(stderr, "a report it accepted does not read back: %s\n", e.what());
    std::abort();
  }
  return 0;
}
