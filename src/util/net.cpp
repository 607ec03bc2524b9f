#include <trainbox/util/net.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <trainbox/util/unique_fd.h>

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

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace trainbox
