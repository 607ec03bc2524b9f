#include <trainbox/env/link_test.h>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "json_fields.h"

#include <trainbox/util/clock.h>

namespace trainbox::env {

TRAINBOX_JSON_FIELDS(LinkMeasurement, node_a, node_b, host_a, host_b, gbytes_per_s, latency_us, error)

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kChunk = 256 * 1024;

void set_timeouts(int fd, double s) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - double(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// One session: 'P' → 'P' (ping), 'B' → count bytes until the peer's EOF, answer the count (8 bytes).
void serve_session(int c, double timeout_s) {
  set_timeouts(c, timeout_s);
  std::vector<char> buf(kChunk);
  char cmd = 0;
  while (recv_all(c, &cmd, 1)) {
    if (cmd == 'P') {
      if (!send_all(c, &cmd, 1)) break;
    } else if (cmd == 'B') {
      std::uint64_t total = 0;
      for (;;) {
        ssize_t k = ::recv(c, buf.data(), buf.size(), 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        total += static_cast<std::uint64_t>(k);
      }
      char out[8];
      for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((total >> (8 * i)) & 0xff);
      send_all(c, out, 8);
      break;
    } else {
      break;
    }
  }
  ::close(c);
}

}  // namespace

LinkServer::~LinkServer() {
  stop_ = true;
  join();
  if (fd_ >= 0) ::close(fd_);
}

int LinkServer::start() {
  fd_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd_ >= 0;
  if (v6) {
    int zero = 0;
    setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // v4-mapped too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
      v6 = false;
    }
  }
  if (!v6) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      error_ = std::string("cannot bind a TCP port: ") + std::strerror(errno);
      return -1;
    }
  }
  if (::listen(fd_, 16) != 0) {
    error_ = std::string("listen: ") + std::strerror(errno);
    return -1;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  return ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void LinkServer::serve(int sessions, double timeout_s) {
  if (fd_ < 0 || sessions <= 0) return;
  thread_ = std::thread([this, sessions, timeout_s] {
    int served = 0;
    auto last = Clock::now();
    while (served < sessions && !stop_) {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r > 0) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          serve_session(c, timeout_s);
          ++served;
          last = Clock::now();
        }
      } else if (seconds_since(last) > timeout_s) {
        break;  // nobody came: the caller reports the missing links
      }
    }
  });
}

void LinkServer::join() {
  if (thread_.joinable()) thread_.join();
}

LinkMeasurement measure_link(const std::string& host, int port, const LinkTestOptions& o) {
  LinkMeasurement m;
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0 || !res) {
    m.error = fmt::format("{} does not resolve: {}", host, gai_strerror(rc));
    return m;
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    m.error = std::string("socket: ") + std::strerror(errno);
    return m;
  }
  // --- connect, bounded ---
  int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, static_cast<int>(o.timeout_s * 1000)) == 1 ? 0 : -1;
    int err = 0;
    socklen_t len = sizeof err;
    if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)) {
      errno = err;
      rc = -1;
    } else if (rc != 0) {
      errno = ETIMEDOUT;
    }
  }
  if (rc != 0) {
    m.error = fmt::format("cannot connect to {}:{}: {}", host, port, std::strerror(errno));
    ::close(fd);
    return m;
  }
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  set_timeouts(fd, o.timeout_s);
  // --- latency: 1-byte round trips ---
  std::vector<double> rtts;
  for (int i = 0; i < std::max(1, o.pings); ++i) {
    char c = 'P';
    const auto t0 = Clock::now();
    if (!send_all(fd, &c, 1) || !recv_all(fd, &c, 1) || c != 'P') {
      m.error = fmt::format("ping to {}:{} got no answer within {} s", host, port, o.timeout_s);
      ::close(fd);
      return m;
    }
    rtts.push_back(seconds_since(t0));
  }
  std::nth_element(rtts.begin(), rtts.begin() + rtts.size() / 2, rtts.end());
  m.latency_us = rtts[rtts.size() / 2] / 2 * 1e6;
  // --- bandwidth: stream for window_s, then wait for the receiver's count ---
  char b = 'B';
  std::vector<char> buf(kChunk, 'x');
  std::uint64_t sent = 0;
  const auto t0 = Clock::now();
  bool ok = send_all(fd, &b, 1);
  while (ok && seconds_since(t0) < o.window_s) {
    ok = send_all(fd, buf.data(), buf.size());
    if (ok) sent += buf.size();
  }
  ::shutdown(fd, SHUT_WR);
  char ack[8];
  if (!ok || !recv_all(fd, ack, 8)) {
    m.error = fmt::format("bulk transfer to {}:{} stalled (no progress within {} s)", host, port, o.timeout_s);
    ::close(fd);
    return m;
  }
  const double secs = seconds_since(t0);
  ::close(fd);
  std::uint64_t got = 0;
  for (int i = 0; i < 8; ++i) got |= std::uint64_t(static_cast<unsigned char>(ack[i])) << (8 * i);
  if (got != sent) {
    m.error = fmt::format("the receiver counted {} of {} bytes", got, sent);
    return m;
  }
  m.gbytes_per_s = secs > 0 ? double(got) / secs / 1e9 : -1;
  return m;
}

std::vector<std::pair<int, int>> link_pairs(int nodes) {
  std::vector<std::pair<int, int>> out;
  if (nodes < 2) return out;
  if (nodes <= 8) {
    for (int a = 0; a < nodes; ++a)
      for (int b = a + 1; b < nodes; ++b) out.emplace_back(a, b);
  } else {
    for (int a = 0; a < nodes; ++a) {
      const int b = (a + 1) % nodes;
      out.emplace_back(std::min(a, b), std::max(a, b));
    }
    std::sort(out.begin(), out.end());
  }
  return out;
}

double median_link_bandwidth(const std::vector<LinkMeasurement>& links) {
  std::vector<double> bw;
  for (const auto& l : links)
    if (l.error.empty() && l.gbytes_per_s > 0) bw.push_back(l.gbytes_per_s);
  if (bw.empty()) return -1;
  std::sort(bw.begin(), bw.end());
  const std::size_t n = bw.size();
  return n % 2 ? bw[n / 2] : (bw[n / 2 - 1] + bw[n / 2]) / 2;
}

std::vector<std::string> slow_link_lines(const std::vector<LinkMeasurement>& links, double factor) {
  std::vector<std::string> out;
  int measured = 0;
  for (const auto& l : links) measured += l.error.empty() && l.gbytes_per_s > 0;
  if (measured < 3) return out;
  const double median = median_link_bandwidth(links);
  for (const auto& l : links) {
    if (!l.error.empty() || l.gbytes_per_s <= 0 || l.gbytes_per_s * factor >= median) continue;
    out.push_back(
        fmt::format("node {} ({}) \u2194 node {} ({}): {:.3g} GB/s, {:.0f}\u00d7 slower than the median link "
                    "({:.3g} GB/s)",
                    l.node_a, l.host_a, l.node_b, l.host_b, l.gbytes_per_s, median / l.gbytes_per_s, median));
  }
  return out;
}

}  // namespace trainbox::env
