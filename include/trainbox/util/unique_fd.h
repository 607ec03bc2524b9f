// trainbox/util/unique_fd.h — a move-only owner of a POSIX file descriptor.
//
// The launcher juggles pipes, log files, a signalfd and the watchdog pipe; every one is a
// UniqueFd so an exception or early return never leaks one into a worker (a leaked pipe
// write end keeps the reader from ever seeing EOF). The destructor closes and never throws.
//
//   UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
//   if (!fd) throw SystemError(...);
//   read(fd.get(), buf, n);          // fd.release() hands ownership away
#pragma once
#include <unistd.h>

#include <utility>

namespace trainbox {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace trainbox
