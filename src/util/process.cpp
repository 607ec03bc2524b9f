#include <trainbox/util/process.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>

extern char** environ;

namespace trainbox {

namespace {

// Forks; the child's stdin is /dev/null and its stdout a pipe that this process reads until
// EOF, or until timeout_ms passes (< 0: no limit), when the child is SIGKILLed.
// in_child runs in the child and must end it (_exit or exec). own_group: the child leads a
// process group of its own, killed whole at the deadline (a tool's own children too).
CaptureResult capture_child(const std::function<void()>& in_child, int timeout_ms, bool own_group = false) {
  CaptureResult res;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return res;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return res;
  }
  if (pid == 0) {
    if (own_group) setpgid(0, 0);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    in_child();
    _exit(127);
  }
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[65536];
  for (;;) {
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fds[0], POLLIN, 0};
      int r = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        kill(own_group ? -pid : pid, SIGKILL);
        res.timed_out = true;
        break;
      }
    }
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0)
      res.out.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  return res;
}

// The child's environment: ours, with `name` replaced by name=value.
std::vector<std::string> environment_with(const std::string& name, const std::string& value) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (!starts_with(*e, name + "=")) env.emplace_back(*e);
  env.push_back(name + "=" + value);
  return env;
}

// A mkdtemp folder for one child's result file, removed with everything in it: a child
// killed mid-write leaves its <path>.tmp.<pid> there too.
class ResultDir {
 public:
  ResultDir() {
    const char* base = std::getenv("TMPDIR");
    path_ = std::string(base && *base ? base : "/tmp") + "/trainbox-result-XXXXXX";
    if (!mkdtemp(path_.data()))
      throw SystemError(fmt::format("cannot create {}: {}", path_, errno_text(errno)),
                        "set TMPDIR to a writable folder");
  }
  ~ResultDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ResultDir(const ResultDir&) = delete;
  ResultDir& operator=(const ResultDir&) = delete;
  std::string file() const { return path_ + "/result.json"; }

 private:
  std::string path_;
};

void write_stdout(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void reset_signals_for_exec() noexcept {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);  // EINVAL for libc's own: harmless
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

CaptureResult run_capture(const std::vector<std::string>& argv) {
  if (argv.empty()) return {};
  return capture_child(
      [&] {
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        reset_signals_for_exec();
        execv(args[0], args.data());
      },
      -1);
}

CaptureResult run_capture_for(const std::vector<std::string>& argv, int timeout_ms) {
  if (argv.empty()) return {};
  return capture_child(
      [&] {
        dup2(1, 2);  // stderr into the same pipe
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        reset_signals_for_exec();
        execvp(args[0], args.data());
      },
      timeout_ms, /*own_group=*/true);
}

CaptureResult run_in_child(const std::function<std::string()>& fn, int timeout_ms) {
  return capture_child(
      [&] {
        std::string out;
        int code = 0;
        try {
          out = fn();
        } catch (const std::exception& e) {
          out = e.what();
          code = 1;
        }
        for (std::size_t done = 0; done < out.size();) {
          ssize_t n = write(1, out.data() + done, out.size() - done);
          if (n > 0)
            done += static_cast<std::size_t>(n);
          else if (errno != EINTR)
            break;
        }
        _exit(code);
      },
      timeout_ms);
}

// --- the result-file contract (result_file.h) ---
void write_file_atomically(const std::string& path, std::string_view text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  auto fail = [&](int err) {
    unlink(tmp.c_str());
    return SystemError(fmt::format("cannot write {}: {}", path, errno_text(err)),
                       "check that its folder exists and is writable");
  };
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw fail(errno);
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      throw fail(err);
    }
    done += static_cast<std::size_t>(n);
  }
  // No fsync: readers are processes on this machine, for which rename alone is atomic.
  if (close(fd) != 0) throw fail(errno);
  if (rename(tmp.c_str(), path.c_str()) != 0) throw fail(errno);
}

void write_result(const nlohmann::json& result, int rank, int indent) {
  if (rank != 0) return;
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  const char* path = std::getenv(kResultFileEnv);
  if (path && *path)
    write_file_atomically(path, result.dump(-1, ' ', false, kReplace) + "\n");
  else
    write_stdout(result.dump(indent, ' ', false, kReplace) + "\n");
}

void forward_result(std::string_view text) {
  if (text.empty()) return;
  const char* path = std::getenv(kResultFileEnv);
  if (path && *path)
    write_file_atomically(path, text);
  else
    write_stdout(text);
}

ResultCapture run_for_result(const std::vector<std::string>& argv) {
  ResultCapture res;
  if (argv.empty()) return res;
  ResultDir dir;
  // Built before fork: the child only calls execve.
  std::vector<std::string> env = environment_with(kResultFileEnv, dir.file());
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  static_cast<CaptureResult&>(res) = capture_child(
      [&] {
        reset_signals_for_exec();
        execve(args[0], args.data(), envp.data());
      },
      -1);
  res.result = read_file(dir.file()).value_or("");
  return res;
}

std::string self_exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = 0;
  return std::filesystem::path(buf).parent_path().string();
}

std::string find_sibling_program(const std::string& name) {
  std::string dir = self_exe_dir();
  if (dir.empty()) return {};
  for (const std::string& p : {dir + "/" + name, dir + "/../libexec/trainbox/" + name})
    if (access(p.c_str(), X_OK) == 0) return p;
  return {};
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return {};
}

double process_age_s() noexcept {
  std::ifstream stat("/proc/self/stat"), up("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
  double uptime = 0;
  if (close == std::string::npos || !(up >> uptime)) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)  // field 22: starttime, in clock ticks since boot
    if (i == 22) {
      const long ticks = ::sysconf(_SC_CLK_TCK);
      const auto start = parse_real(field);
      return ticks > 0 && start ? uptime - *start / static_cast<double>(ticks) : -1;
    }
  return -1;
}

}  // namespace trainbox
