// The launcher's own lines on the console (private to src/launch): "trainbox run: …" on stderr,
// one write per line so they do not interleave with the workers' relayed output mid-line.
#pragma once
#include <cstdio>
#include <string>

namespace trainbox::launch {

inline void note(const std::string& line) { std::fputs(("trainbox run: " + line + "\n").c_str(), stderr); }

}  // namespace trainbox::launch
