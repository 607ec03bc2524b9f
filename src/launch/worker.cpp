#include "worker.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/process.h>
#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking console (rare): wait until it drains
        fd_set set;
        FD_ZERO(&set);
        FD_SET(fd, &set);
        select(fd + 1, nullptr, &set, nullptr, nullptr);
        continue;
      }
      return;  // EPIPE etc.: the reader went away; the worker must keep running regardless
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

UniqueFd open_log(const std::string& path) {
  if (path.empty()) return {};
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd)
    throw UsageError(fmt::format("cannot write worker log {}: {}", path, errno_text(errno)),
                     "pass a writable --log-dir");
  return fd;
}

std::string strip_terminator(std::string line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

}  // namespace

// --- output ---
void Worker::relay(Stream& s, const std::vector<std::string>& lines) {
  if (lines.empty()) return;
  if (&s == &err)
    for (const auto& l : lines) {
      stderr_tail.push_back(strip_terminator(l));
      if (stderr_tail.size() > kTailLines) stderr_tail.pop_front();
    }
  if (!s.console) return;
  std::string text;
  for (const auto& l : lines) {
    text += prefix;
    text += l;
  }
  write_all(s.console_fd, text);  // one write per batch: lines of different ranks never mix
}

void Worker::pump(Stream& s) {
  char buf[65536];
  for (std::size_t total = 0; s.pipe && total < (1u << 20);) {
    ssize_t n = read(s.pipe.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
    }
    if (n <= 0) {  // EOF (or a read error, which ends the stream just the same)
      if (auto rest = s.lines.finish()) relay(s, {*rest});
      s.pipe.reset();
      return;
    }
    std::string_view data(buf, static_cast<std::size_t>(n));
    if (s.file) write_all(s.file.get(), data);  // the file gets raw bytes, unprefixed
    relay(s, s.lines.feed(data));
    total += static_cast<std::size_t>(n);
  }
}

void Worker::close_streams() {
  for (Stream* s : {&out, &err}) {
    if (!s->pipe) continue;
    if (auto rest = s->lines.finish()) relay(*s, {*rest});
    s->pipe.reset();
  }
}

void Worker::signal_group(int sig) const {
  if (pid <= 0) return;
  if (kill(-pid, sig) != 0 && errno == ESRCH && !reaped) kill(pid, sig);
}

bool Worker::has_exited() const {
  if (reaped) return true;
  if (pid <= 0) return false;
  siginfo_t info{};
  info.si_pid = 0;  // stays 0 when WNOHANG finds nothing (POSIX leaves it unspecified otherwise)
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0)
    if (errno != EINTR) return false;
  return info.si_pid == pid;
}

// --- spawning ---
std::string find_executable(const std::string& command) {
  if (command.find('/') != std::string::npos) {
    if (is_executable_file(command)) return command;
    int err = access(command.c_str(), F_OK) == 0 ? EACCES : ENOENT;
    throw UsageError(
        fmt::format("cannot run '{}': {}", command, errno_text(err)),
        err == EACCES ? "make it executable (chmod +x) or run it through its interpreter" : "check the path");
  }
  if (auto found = find_on_path(command); !found.empty()) return found;
  throw UsageError(fmt::format("cannot run '{}': not found on PATH", command),
                   "check the spelling, or give its path (e.g. ./train.sh)");
}

Worker spawn_worker(const SpawnSpec& spec) {
  Worker w;
  w.local_rank = spec.local_rank;
  w.rank = spec.rank;
  w.prefix = spec.prefix;
  w.out.file = open_log(spec.stdout_log);
  w.err.file = open_log(spec.stderr_log);
  w.out.console = spec.stdout_console;
  w.err.console = spec.stderr_console;
  w.out.console_fd = STDOUT_FILENO;
  w.err.console_fd = STDERR_FILENO;

  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out_fds[2], err_fds[2], status_fds[2];
  if (pipe2(out_fds, O_CLOEXEC) != 0) throw SystemError("cannot create a worker pipe: " + errno_text(errno));
  UniqueFd out_r(out_fds[0]), out_w(out_fds[1]);
  if (pipe2(err_fds, O_CLOEXEC) != 0) throw SystemError("cannot create a worker pipe: " + errno_text(errno));
  UniqueFd err_r(err_fds[0]), err_w(err_fds[1]);
  if (pipe2(status_fds, O_CLOEXEC) != 0) throw SystemError("cannot create a worker pipe: " + errno_text(errno));
  UniqueFd status_r(status_fds[0]), status_w(status_fds[1]);
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  const pid_t launcher = getpid();

  pid_t pid = fork();
  if (pid < 0) throw SystemError("cannot fork a worker: " + errno_text(errno));
  if (pid == 0) {
    // --- child ---
    setsid();  // own session and process group: pgid == pid
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != launcher) _exit(137);  // the launcher died before prctl took effect
    if (devnull) dup2(devnull.get(), STDIN_FILENO);
    dup2(out_w.get(), STDOUT_FILENO);
    dup2(err_w.get(), STDERR_FILENO);
    // Default dispositions, empty mask: not the launcher's ignored SIGPIPE and blocked
    // SIGINT/SIGTERM (its signalfd), nor a SIG_IGN it inherited (`trainbox run … &` in a
    // script), which exec would keep and which would make a forwarded SIGINT do nothing.
    reset_signals_for_exec();
    // Nothing but stdin/stdout/stderr crosses exec: descriptors the launcher's threads opened
    // without O_CLOEXEC (trainbox run --dashboard's accepted connections) would otherwise keep
    // a browser's connection half-open for the worker's lifetime. A system call, async-signal-
    // safe; ENOSYS (Linux < 5.11) leaves them as they were.
    syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
    execve(spec.exe.c_str(), argv.data(), envp.data());
    int e = errno;
    (void)!write(status_w.get(), &e, sizeof e);
    _exit(127);
  }

  // --- parent ---
  w.pid = pid;
  fcntl(out_r.get(), F_SETFL, fcntl(out_r.get(), F_GETFL) | O_NONBLOCK);
  fcntl(err_r.get(), F_SETFL, fcntl(err_r.get(), F_GETFL) | O_NONBLOCK);
  w.out.pipe = std::move(out_r);
  w.err.pipe = std::move(err_r);
  w.exec_status = std::move(status_r);
  return w;  // the write ends close here: only the child holds them
}

void await_exec(Worker& w, const std::string& command) {
  if (!w.exec_status) return;
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(w.exec_status.get(), &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  w.exec_status.reset();
  if (n != static_cast<ssize_t>(sizeof exec_errno)) return;  // EOF: exec succeeded
  int status;
  while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
  }
  w.reaped = true;
  w.wait_status = status;
  throw UsageError(
      fmt::format("cannot run '{}': {}", command, errno_text(exec_errno)),
      exec_errno == ENOEXEC ? "a script needs a #! line, or run it through its interpreter" : "check the command");
}

// --- exit status ---
std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : fmt::format("signal {}", sig);
}

std::string describe_wait_status(int s) {
  if (WIFEXITED(s)) return fmt::format("exit code {}", WEXITSTATUS(s));
  if (WIFSIGNALED(s)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(s));
    return fmt::format("signal SIG{} ({})", abbrev ? abbrev : "?", WTERMSIG(s));
  }
  return fmt::format("status {:#x}", s);
}

int exit_code_of(int s) {
  if (WIFEXITED(s)) return WEXITSTATUS(s);
  if (WIFSIGNALED(s)) return 128 + WTERMSIG(s);
  return kExitFailed;
}

}  // namespace trainbox::launch
