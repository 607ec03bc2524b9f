#include <trainbox/launch/stacks.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <trainbox/util/process.h>
#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace {

bool runs_python(pid_t pid) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
  return !ec && starts_with(exe.filename().string(), "python");
}

// A C/C++ symbol as a reader wants it: "trainbox::train::(anonymous namespace)::fault_injection_stall(int, long)"
// → "fault_injection_stall"; "gloo::transport::tcp::UnboundBuffer::waitRecv(...)" → "UnboundBuffer::waitRecv".
std::string short_name(std::string s) {
  // drop the argument list and template arguments (balanced, from the outside in)
  auto strip = [&](char open, char close) {
    std::string out;
    int depth = 0;
    for (char c : s) {
      if (c == open)
        ++depth;
      else if (c == close && depth > 0)
        --depth;
      else if (depth == 0)
        out += c;
    }
    s = out;
  };
  if (auto at = s.find("@@"); at != std::string::npos) s = s.substr(0, at);
  if (auto at = s.find("@GLIBC"); at != std::string::npos) s = s.substr(0, at);
  const std::string anon = "(anonymous namespace)::";
  for (std::size_t p; (p = s.find(anon)) != std::string::npos;) s.erase(p, anon.size());
  strip('(', ')');
  strip('<', '>');
  auto parts = split(s, ':');
  std::vector<std::string> names;
  for (auto& p : parts)
    if (!p.empty()) names.push_back(p);
  if (names.empty()) return s;
  if (names.size() == 1) return names.back();
  // keep the class for methods (Capitalised second-to-last), else just the function
  const std::string& owner = names[names.size() - 2];
  return !owner.empty() && std::isupper(static_cast<unsigned char>(owner[0])) ? owner + "::" + names.back()
                                                                              : names.back();
}

// C library and kernel-boundary frames, named for what the thread is doing.
std::string libc_kind(const std::string& sym) {
  static const std::vector<std::pair<std::string, std::string>> kinds = {
      {"nanosleep", "sleep"}, {"clock_nanosleep", "sleep"},
      {"usleep", "sleep"},    {"sleep", "sleep"},
      {"futex", "wait"},      {"pthread_cond", "wait"},
      {"sem_", "wait"},       {"pthread_join", "wait"},
      {"epoll_wait", "poll"}, {"poll", "poll"},
      {"select", "poll"},     {"__recv", "read"},
      {"recv", "read"},       {"__libc_read", "read"},
      {"read", "read"},       {"accept", "accept"},
      {"waitpid", "waitpid"}, {"wait4", "waitpid"}};
  std::string s = sym;
  while (!s.empty() && s[0] == '_') s.erase(0, 1);
  for (const auto& [prefix, kind] : kinds)
    if (starts_with(s, prefix)) return kind;
  return {};
}

std::string join_frames(const std::vector<std::string>& frames, int depth) {
  std::string out;
  for (int i = 0; i < depth && i < static_cast<int>(frames.size()); ++i) out += (i ? " ← " : "") + frames[i];
  return out;
}

// A tool on PATH, else next to $TRAINBOX_PYTHON (py-spy installed into a venv is there).
std::string find_tool(const std::string& name) {
  std::string p = find_on_path(name);
  if (!p.empty()) return p;
  if (const char* py = std::getenv("TRAINBOX_PYTHON"); py && *py) {
    const std::string cand = (std::filesystem::path(py).parent_path() / name).string();
    if (is_executable_file(cand)) return cand;
  }
  return {};
}

}  // namespace

StackCapture capture_stacks(pid_t pid, std::chrono::milliseconds deadline) {
  StackCapture c;
  const int ms = static_cast<int>(deadline.count());
  auto run = [&](const std::string& tool, const std::vector<std::string>& argv, const std::string& install) {
    const std::string path = find_tool(tool);
    if (path.empty()) {
      c.notes.push_back(
          fmt::format("{} not found, so no {} stacks: {}", tool, tool == "py-spy" ? "Python" : "native", install));
      return;
    }
    std::vector<std::string> args = argv;
    args[0] = path;
    auto r = run_capture_for(args, ms);
    c.text += fmt::format("=== {} ===\n{}", fmt::join(argv, " "), r.out);
    if (!r.out.empty() && r.out.back() != '\n') c.text += '\n';
    if (r.timed_out) {
      c.timed_out = true;
      c.notes.push_back(fmt::format("{} did not answer within {} ms and was stopped", tool, ms));
      c.text += fmt::format("(abandoned after {} ms)\n", ms);
    } else if (r.exit_code != 0) {
      c.notes.push_back(fmt::format("{} exited {} for pid {}", tool, r.exit_code, pid));
    }
  };
  c.python = runs_python(pid);
  if (c.python) run("py-spy", {"py-spy", "dump", "--pid", std::to_string(pid)}, "python3 -m pip install py-spy");
  run("eu-stack", {"eu-stack", "-p", std::to_string(pid)}, "apt-get install elfutils");
  return c;
}

std::string innermost_frames(const std::string& text, int depth) {
  const auto lines = split(text, '\n');
  // Python frames (py-spy dump): the first thread's frames, "    func (file.py:12)"
  static const std::regex py_frame(R"(^\s{4}(\S+) \(([^)]+)\)\s*$)");
  std::vector<std::string> py;
  bool in_py = false, in_thread = false;
  for (const auto& l : lines) {
    if (starts_with(l, "=== py-spy"))
      in_py = true;
    else if (starts_with(l, "=== "))
      in_py = false;
    if (!in_py) continue;
    if (starts_with(l, "Thread ")) {
      if (in_thread) break;  // the first thread only (py-spy lists the main thread first)
      in_thread = true;
      continue;
    }
    std::smatch m;
    if (in_thread && std::regex_match(l, m, py_frame)) {
      std::string file = m[2].str();
      if (auto slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
      py.push_back(m[1].str() + " (" + file + ")");
    }
  }
  if (!py.empty()) return join_frames(py, depth);
  // Native frames (eu-stack): the first TID block, "#3  0x00… symbol"
  static const std::regex native_frame(R"(^#\d+\s+0x[0-9a-f]+\s+(.+)$)");
  std::vector<std::string> frames;
  bool in_tid = false;
  for (const auto& l : lines) {
    if (starts_with(l, "TID ")) {
      if (in_tid) break;
      in_tid = true;
      continue;
    }
    std::smatch m;
    if (!in_tid || !std::regex_match(l, m, native_frame)) continue;
    const std::string sym = trim(m[1].str());
    if (sym.empty() || starts_with(sym, "0x")) continue;
    // C library functions (no "::") are named for what they do; everything else is shortened
    std::string name = sym.find("::") == std::string::npos ? libc_kind(sym) : std::string();
    if (name.empty()) name = short_name(sym);
    if (name.empty() || name == "start_thread" || name == "clone3" || name == "libc_start_call_main") continue;
    if (!frames.empty() && frames.back() == name) continue;
    frames.push_back(name);
  }
  return join_frames(frames, depth);
}

}  // namespace trainbox::launch
