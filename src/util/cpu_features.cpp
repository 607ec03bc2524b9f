// cpu_features(): /proc/cpuinfo's flags (util/cpu_features.h).
#include <trainbox/util/cpu_features.h>

#include <fstream>
#include <sstream>

#include <trainbox/util/strings.h>

namespace trainbox {
namespace {

void add_words(const std::string& text, std::set<std::string>& out) {
  std::string word;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == ',' || c == '\n') {
      if (!word.empty()) out.insert(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.insert(word);
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
  std::ifstream in(cpuinfo_path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return parse_cpuinfo(text.str());
}

}  // namespace trainbox
