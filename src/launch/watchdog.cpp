#include "watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::launch {

namespace {

[[noreturn]] void watchdog_main(int read_fd, const std::string& temp_dir) {
  setsid();
  prctl(PR_SET_NAME, "trainbox-watch", 0, 0, 0);
  // Terminal and job-control signals are for the launcher, which forwards them; the watchdog
  // must outlive it. SIGTERM keeps its default so an operator can still remove it.
  for (int sig : {SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU}) signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Hold nothing of the launcher's: not its stdout (a `$(trainbox run …)` would wait for us),
  // not a worker pipe. Only the command pipe, as fd 3.
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0)
    for (int fd = 0; fd < 3; ++fd) dup2(devnull, fd);
  if (read_fd != 3) dup2(read_fd, 3);
  close_range(4, ~0U, 0);

  std::set<pid_t> groups;
  std::string pending;
  char buf[4096];
  for (;;) {
    ssize_t n = read(3, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the launcher is gone (or closed the pipe at the end of a run)
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string msg = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (msg.size() < 2) continue;
      pid_t pgid = static_cast<pid_t>(std::atol(msg.c_str() + 1));
      if (pgid <= 1) continue;
      if (msg[0] == '+')
        groups.insert(pgid);
      else if (msg[0] == '-')
        groups.erase(pgid);
    }
  }
  for (pid_t g : groups) kill(-g, SIGKILL);
  // After a SIGKILL the launcher cannot remove its error-file folder; evidence stays.
  if (!temp_dir.empty() && !holds_evidence(temp_dir)) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir, ec);
  }
  _exit(0);
}

}  // namespace

bool holds_evidence(const std::string& temp_dir) {
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(temp_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename();
    if (name == "error.json" || (name == "stacks" && it->is_directory(ec)) ||
        name.string().rfind("nccl_trace_rank_", 0) == 0)
      return true;
  }
  return false;
}

Watchdog Watchdog::start(const std::string& temp_dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw SystemError("cannot create the watchdog pipe: " + errno_text(errno));
  UniqueFd rd(fds[0]), wr(fds[1]);
  pid_t pid = fork();
  if (pid < 0) throw SystemError("cannot fork the watchdog: " + errno_text(errno));
  if (pid == 0) {
    wr.reset();
    watchdog_main(rd.release(), temp_dir);
  }
  Watchdog w;
  w.pid_ = pid;
  w.pipe_ = std::move(wr);
  return w;
}

Watchdog::~Watchdog() {
  if (pid_ <= 0) return;
  pipe_.reset();  // EOF: the watchdog kills what it still knows (nothing, after a clean run) and exits
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void Watchdog::send(char op, pid_t pgid) noexcept {
  if (!pipe_) return;
  std::string msg = fmt::format("{}{}\n", op, pgid);
  // Short writes to a pipe are atomic (< PIPE_BUF); EPIPE (SIGPIPE is ignored) means it died.
  ssize_t n;
  while ((n = write(pipe_.get(), msg.data(), msg.size())) < 0 && errno == EINTR) {
  }
  if (n < 0) pipe_.reset();
}

void Watchdog::watch(pid_t pgid) noexcept { send('+', pgid); }
void Watchdog::forget(pid_t pgid) noexcept { send('-', pgid); }

void Watchdog::lost() noexcept {
  pipe_.reset();
  pid_ = -1;
}

}  // namespace trainbox::launch
