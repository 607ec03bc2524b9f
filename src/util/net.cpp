#include <trainbox/util/net.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include <trainbox/util/unique_fd.h>
#include <trainbox/util/clock.h>

namespace trainbox {

namespace {

std::string numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {};
  if (getnameinfo(sa, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return buf;
}

}  // namespace

std::optional<Route> route_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return std::nullopt;
  std::optional<Route> out;
  for (addrinfo* ai = res; ai && !out; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) continue;  // no route: try the next address
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    Route r;
    r.address = numeric(reinterpret_cast<sockaddr*>(&local), len);
    ifaddrs* ifs = nullptr;
    if (getifaddrs(&ifs) == 0) {
      for (ifaddrs* i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != local.ss_family) continue;
        const socklen_t l = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
        if (numeric(i->ifa_addr, l) == r.address) {
          r.interface = i->ifa_name;
          break;
        }
      }
      freeifaddrs(ifs);
    }
    out = r;
  }
  freeaddrinfo(res);
  return out;
}

std::string tcp_reach(const std::string& host, int port, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + seconds(timeout_s);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0 || !res)
    return fmt::format("{} does not resolve ({})", host, gai_strerror(rc));
  std::string why = "no address";
  while (true) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd) continue;
      int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        pollfd pfd{fd.get(), POLLOUT, 0};
        rc = ::poll(&pfd, 1, static_cast<int>(std::max<long long>(0, left)));
        if (rc == 0) {
          why =
              fmt::format("no answer within {:.0f} s (a firewall dropping the packets, or a wrong address)", timeout_s);
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      }
      if (rc == 0) {
        freeaddrinfo(res);
        return {};
      }
      why = std::strerror(errno);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // refused: the server may not be up yet
  }
  freeaddrinfo(res);
  return why;
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost") return true;
  const std::string text(host);  // inet_pton wants a NUL-terminated string
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) != 1) return false;
  // ::ffff:127.x.y.z is how a dual-stack (IPV6_V6ONLY=0) socket names an IPv4 loopback peer.
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

std::string host_name(const std::string& fallback) {
  char buf[256] = {};  // HOST_NAME_MAX is 64 on Linux; the last byte stays NUL if it is cut
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return fallback;
  return buf;
}

}  // namespace trainbox
