// cpu_features(): /proc/cpuinfo's flags (util/cpu_features.h).
#include <trainbox/util/cpu_features.h>

#include <sstream>

#include <trainbox/util/strings.h>

namespace trainbox {
namespace {

// A flags line's words: separated by spaces, tabs or commas (TRAINBOX_CPU_FLAGS="avx2,amx_bf16").
void add_words(std::string text, std::set<std::string>& out) {
  for (char& c : text)
    if (c == '\t' || c == ',' || c == '\n') c = ' ';
  for (auto& w : split(text, ' ')) out.insert(std::move(w));
}

}  // namespace

CpuFeatures parse_cpuinfo(const std::string& text) {
  CpuFeatures f;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    if (key != "flags" && key != "Features") continue;
    add_words(line.substr(colon + 1), f.flags);
    f.source = "/proc/cpuinfo";
    break;
  }
  return f;
}

CpuFeatures cpu_features(const EnvLookup& env, const std::string& cpuinfo_path) {
  if (auto forced = env("TRAINBOX_CPU_FLAGS")) {
    CpuFeatures f;
    add_words(*forced, f.flags);
    f.source = "TRAINBOX_CPU_FLAGS";
    return f;
  }
  const auto text = read_file(cpuinfo_path);
  return text ? parse_cpuinfo(*text) : CpuFeatures{};
}

}  // namespace trainbox
