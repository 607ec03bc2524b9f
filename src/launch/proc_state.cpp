#include <trainbox/launch/proc_state.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace {

// A small /proc file in one read (they are generated on read; no seeking).
std::optional<std::string> slurp(const std::string& path, std::size_t cap = 16384) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() >= cap) break;
  }
  ::close(fd);
  return out;
}

// /proc/<pid>/wchan: a symbol, or "0" when running (and when kptr_restrict hides it).
std::string read_wchan(const std::string& path) {
  auto w = slurp(path, 256);
  if (!w) return {};
  std::string s = trim(*w);
  return s == "0" ? std::string() : s;
}

}  // namespace

bool parse_proc_stat(std::string_view line, char& state, std::uint64_t& cpu_ticks) {
  const auto close = line.rfind(')');
  if (close == std::string_view::npos) return false;
  // after ") ": state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8) flags(9) minflt(10)
  // cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15)
  const auto f = split(line.substr(close + 1), ' ');
  if (f.size() < 13 || f[0].size() != 1) return false;
  char* end = nullptr;
  const unsigned long long ut = std::strtoull(f[11].c_str(), &end, 10);
  if (*end) return false;
  const unsigned long long st = std::strtoull(f[12].c_str(), &end, 10);
  if (*end) return false;
  state = f[0][0];
  cpu_ticks = ut + st;
  return true;
}

double clock_ticks_per_second() {
  static const double hz = [] {
    const long t = sysconf(_SC_CLK_TCK);
    return t > 0 ? static_cast<double>(t) : 100.0;
  }();
  return hz;
}

std::optional<ProcSample> read_proc(pid_t pid, const std::string& proc_root, bool with_stack) {
  const std::string dir = fmt::format("{}/{}", proc_root, pid);
  const auto stat = slurp(dir + "/stat");
  ProcSample s;
  s.pid = pid;
  if (!stat || !parse_proc_stat(*stat, s.state, s.cpu_ticks)) return std::nullopt;
  s.wchan = read_wchan(dir + "/wchan");
  // A stopped process is stopped in every thread, a D one already says where; a sleeping or
  // running one may still have a thread in D that the main thread waits for.
  if (s.state == 'S' || s.state == 'R') {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/task", ec)) {
      const std::string tid = e.path().filename().string();
      if (tid == std::to_string(pid)) continue;
      char st = '?';
      std::uint64_t ticks = 0;
      const auto ts = slurp(e.path().string() + "/stat");
      if (!ts || !parse_proc_stat(*ts, st, ticks) || st != 'D') continue;
      s.state = 'D';
      s.d_tid = static_cast<pid_t>(std::atol(tid.c_str()));
      s.wchan = read_wchan(e.path().string() + "/wchan");
      break;
    }
  }
  if (with_stack)
    if (auto k = slurp(dir + "/stack", 65536)) s.kernel_stack = *k;
  return s;
}

std::string describe_state(const ProcSample& s) {
  const std::string in = s.wchan.empty() ? std::string() : " in " + s.wchan;
  if (s.frozen()) return fmt::format("frozen by a cgroup freezer ({})", s.wchan);
  switch (s.state) {
    case 'T': return "state T: SIGSTOP, a debugger or a freezer";
    case 't': return "state t: stopped by a debugger (ptrace)";
    case 'D': return fmt::format("state D{}{}", in, s.d_tid ? fmt::format(" (thread {})", s.d_tid) : std::string());
    default: return fmt::format("state {}{}", s.state, in);
  }
}

}  // namespace trainbox::launch
