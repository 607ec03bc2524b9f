#include "signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include <trainbox/util/errors.h>

namespace trainbox::launch {

SignalScope::SignalScope() {
  sigemptyset(&handled_);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&handled_, s);
  sigprocmask(SIG_BLOCK, &handled_, &original_);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old_pipe_);
  fd_.reset(signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd_) {
    restore();
    throw SystemError("cannot create a signalfd: " + errno_text(errno));
  }
}

int SignalScope::next() {
  signalfd_siginfo si;
  ssize_t n = read(fd_.get(), &si, sizeof si);
  return n == static_cast<ssize_t>(sizeof si) ? static_cast<int>(si.ssi_signo) : 0;
}

void SignalScope::restore() {
  fd_.reset();
  sigaction(SIGPIPE, &old_pipe_, nullptr);
  sigprocmask(SIG_SETMASK, &original_, nullptr);
}

}  // namespace trainbox::launch
