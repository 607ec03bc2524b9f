// The launcher's signals (private to src/launch): the ones it handles are blocked and read from
// a signalfd, so the poll loop sees them in order with worker output and exits (no
// async-signal-safety puzzles). SIGPIPE is ignored: a closed console must not kill the
// launcher and orphan the job. What each signal means for the job is the Supervisor's
// (launcher.cpp, on_signal): SIGINT/TERM/HUP/QUIT stop it, SIGUSR1 dumps stacks, SIGUSR2 is
// forwarded.
//   SignalScope signals;                  // blocks them until destroyed
//   poll({signals.fd(), POLLIN, 0} …);
//   for (int sig; (sig = signals.next()) != 0;) handle(sig);
#pragma once
#include <signal.h>

#include <trainbox/util/unique_fd.h>

namespace trainbox::launch {

class SignalScope {
 public:
  SignalScope();  // SystemError when the signalfd cannot be made (the mask is restored first)
  ~SignalScope() { restore(); }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  int fd() const { return fd_.get(); }
  const sigset_t& original_mask() const { return original_; }
  // The next pending signal, 0 when none.
  int next();

 private:
  void restore();
  sigset_t handled_{}, original_{};
  struct sigaction old_pipe_ {};
  UniqueFd fd_;
};

// SIGINT, SIGTERM, SIGHUP, SIGQUIT: the job stops, with no restart after it.
inline bool is_stop_signal(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT; }

}  // namespace trainbox::launch
