#include "channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::launch {

JsonChannel::JsonChannel(UniqueFd fd) : fd_(std::move(fd)) {
  if (!fd_) return;
  fcntl(fd_.get(), F_SETFL, fcntl(fd_.get(), F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void JsonChannel::close(const std::string& why) {
  if (fd_ && error_.empty()) error_ = why;
  fd_.reset();
  out_.clear();
}

bool JsonChannel::send(const msg::Message& m) { return fd_ ? send_line(msg::encode_line(m)) : false; }

bool JsonChannel::send_line(std::string_view line) {
  if (!fd_) return false;
  out_ += line;
  out_ += '\n';
  return flush();
}

bool JsonChannel::flush() {
  while (fd_ && !out_.empty()) {
    ssize_t n = ::send(fd_.get(), out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;  // the rest on POLLOUT
      close(errno_text(errno));
      return false;
    }
    out_.erase(0, static_cast<std::size_t>(n));
  }
  return static_cast<bool>(fd_);
}

bool JsonChannel::receive(std::vector<msg::Message>& out) {
  char buf[16384];
  while (fd_) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close(errno_text(errno));
      return false;
    }
    if (n == 0) {
      close("connection closed by the other side");
      return false;
    }
    in_.append(buf, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = in_.find('\n')) != std::string::npos;) {
      const std::string line = in_.substr(0, nl);
      in_.erase(0, nl + 1);
      try {
        out.push_back(msg::decode_line(line));
      } catch (const ProtocolError& e) {
        malformed_ = true;
        close(e.what());
        return false;
      }
    }
    if (in_.size() > kMaxMessage) {
      close("a message longer than 1 MiB");
      return false;
    }
  }
  return static_cast<bool>(fd_);
}

int ms_until(Deadline deadline, int cap_ms) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, cap_ms));
}

UniqueFd connect_tcp(const std::string& host, int port, Deadline deadline, std::string& err, int extra_fd,
                     const std::function<void()>& on_extra) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); gai != 0) {
    err = fmt::format("cannot resolve '{}': {}", host, gai_strerror(gai));
    return {};
  }
  // Freed however this ends: on_extra may throw (a signal abandons the join).
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(res, &freeaddrinfo);
  err = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) {
      err = errno_text(errno);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      err = errno_text(errno);
      continue;
    }
    pollfd p[2] = {{fd.get(), POLLOUT, 0}, {extra_fd, POLLIN, 0}};
    for (;;) {
      int r = poll(p, extra_fd >= 0 ? 2 : 1, ms_until(deadline));
      if (r < 0 && errno == EINTR) continue;
      if (r > 0 && p[1].revents && on_extra) on_extra();
      if (r <= 0 || p[0].revents) break;
    }
    if (!p[0].revents) {
      err = "timed out";
      continue;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      err = errno_text(soerr);
      continue;
    }
    err.clear();
    return fd;
  }
  return {};
}

namespace {
// "::ffff:10.0.0.1" (an IPv4 peer of a dual-stack socket) → "10.0.0.1".
bool starts_with_v4_mapped(const std::string& h) {
  return h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos;
}

std::string numeric(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return "?";
  std::string h = host;
  if (starts_with_v4_mapped(h)) h = h.substr(7);
  return h;
}
}  // namespace

std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return numeric(ss, len);
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return numeric(ss, len);
}

}  // namespace trainbox::launch
