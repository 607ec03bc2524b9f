// A TOML config and --set overrides, as `trainbox train CONFIG --set k=v` reads them. Input:
// up to 3 override lines, then a line "---", then the TOML text (no "---": all TOML).
// Property: a config that validates round-trips through to_toml (the run dir's config.toml,
// which --resume auto reads back) to the same text.
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include <trainbox/train/config.h>
#include <trainbox/util/errors.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  std::string toml = in;
  if (auto sep = in.find("\n---\n"); sep != std::string::npos) {
    toml = in.substr(sep + 5);
    std::size_t pos = 0;
    while (pos <= sep && overrides.size() < 3) {
      auto nl = in.find('\n', pos);
      if (nl == std::string::npos || nl > sep) nl = sep;
      overrides.push_back(in.substr(pos, nl - pos));
      pos = nl + 1;
    }
  }
  std::string text;
  try {
    trainbox::train::Config c = trainbox::train::parse_config(toml, "<fuzz>");
    for (const auto& o : overrides) trainbox::train::apply_override(c, o);
    trainbox::train::validate(c);
    text = trainbox::train::to_toml(c);
  } catch (const trainbox::Error&) {
    return 0;
  }
  try {
    const std::string again = trainbox::train::to_toml(trainbox::train::parse_config(text, "<round trip>"));
    if (again != text) std::fprintf(stderr, "to_toml:\n%s\nre-read:\n%s\n", text.c_str(), again.c_str());
    FUZZ_CHECK(again == text);
  } catch (const trainbox::Error& e) {
    std::fprintf(stderr, "to_toml wrote a config it cannot read back: %s\n%s\n", e.what(), text.c_str());
    std::abort();
  }
  return 0;
}
