#include <trainbox/launch/ports.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/unique_fd.h>

namespace trainbox::launch {

namespace {

// 0 when `sa` could be bound (and was released again), else errno.
int try_bind(const sockaddr* sa, socklen_t len, bool dual_stack = false) {
  UniqueFd fd(socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno;
  int one = 1, zero = 0;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (sa->sa_family == AF_INET6 && dual_stack) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  return bind(fd.get(), sa, len) == 0 ? 0 : errno;
}

[[noreturn]] void throw_in_use(const std::string& addr, int port, int err) {
  std::string holder = describe_port_holder(port);
  std::string alt;
  try {
    alt = fmt::format(" (e.g. --master-port {})", pick_free_port());
  } catch (const Error&) {
  }
  if (err == EADDRINUSE)
    throw UsageError(fmt::format("port {} on {} is in use{} (bind: {})", port, addr,
                                 holder.empty() ? "" : ", held by " + holder, errno_text(err)),
                     fmt::format("pass --standalone to pick a free port, or another --master-port{}; a stale "
                                 "worker of an earlier run may still hold it",
                                 alt));
  throw UsageError(fmt::format("cannot bind port {} on {} (bind: {})", port, addr, errno_text(err)),
                   err == EACCES ? fmt::format("ports below 1024 need privileges; pass --master-port above 1023{}", alt)
                                 : fmt::format("pass --standalone, or another --master-port{}", alt));
}

// socket inode → "pid N (comm)" by scanning /proc/<pid>/fd.
std::string process_with_socket(const std::string& inode) {
  const std::string target = "socket:[" + inode + "]";
  std::error_code ec;
  for (const auto& p : std::filesystem::directory_iterator("/proc", ec)) {
    std::string pid = p.path().filename().string();
    if (pid.empty() || !std::isdigit((unsigned char)pid[0])) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(p.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(fd.path(), link_ec).string() == target) {
        std::string comm = trim(read_file(p.path().string() + "/comm").value_or("?"));
        return fmt::format("pid {} ({})", pid, comm);
      }
    }
  }
  return {};
}

}  // namespace

int pick_free_port(const std::string& host) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;  // the kernel picks a free ephemeral port
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1)
    throw UsageError(fmt::format("cannot pick a port on '{}': not an IPv4 address", host), "use 127.0.0.1");
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw SystemError("cannot create a socket: " + errno_text(errno));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    throw SystemError(fmt::format("cannot bind a free port on {}: {}", host, errno_text(errno)));
  socklen_t len = sizeof sa;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    throw SystemError("getsockname: " + errno_text(errno));
  return ntohs(sa.sin_port);
}

void check_port_available(const std::string& addr, int port) {
  // --- the address itself, when it is one of this machine's ---
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    // Kubernetes DNS can lag behind pod start; torch's client retries, so only warn.
    std::fprintf(stderr,
                 "trainbox run: warning: cannot resolve master address '%s' (%s); workers cannot connect "
                 "until it resolves\n",
                 addr.c_str(), gai_strerror(gai));
  } else {
    int err = try_bind(res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    // EADDRNOTAVAIL: not this machine's address (a Kubernetes service IP, say) — only the
    // wildcard check below applies.
    if (err != 0 && err != EADDRNOTAVAIL) throw_in_use(addr, port, err);
  }
  // --- the wildcard the TCPStore listens on: [::] dual-stack covers 0.0.0.0 too ---
  sockaddr_in6 any6{};
  any6.sin6_family = AF_INET6;
  any6.sin6_port = htons(static_cast<uint16_t>(port));
  any6.sin6_addr = in6addr_any;
  int err = try_bind(reinterpret_cast<sockaddr*>(&any6), sizeof any6, true);
  if (err == EAFNOSUPPORT || err == EADDRNOTAVAIL) {  // no IPv6 on this machine
    sockaddr_in any4{};
    any4.sin_family = AF_INET;
    any4.sin_port = htons(static_cast<uint16_t>(port));
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    err = try_bind(reinterpret_cast<sockaddr*>(&any4), sizeof any4);
  }
  if (err != 0) throw_in_use(addr, port, err);
}

std::string describe_port_holder(int port) {
  // /proc/net/tcp{,6}: "sl local_address rem_address st … uid timeout inode"; the port is hex
  // after the colon, st 0A = LISTEN. Prefer a listener, else any socket bound to the port.
  std::string listening, bound;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      if (!(ls >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
      auto colon = local.rfind(':');
      if (colon == std::string::npos || std::strtol(local.c_str() + colon + 1, nullptr, 16) != port) continue;
      if (inode == "0") continue;
      if (st == "0A" && listening.empty())
        listening = inode;
      else if (st != "06" && bound.empty())
        bound = inode;  // 06 = TIME_WAIT: no owner
    }
  }
  for (const std::string& inode : {listening, bound})
    if (!inode.empty())
      if (auto who = process_with_socket(inode); !who.empty()) return who;
  return {};
}

}  // namespace trainbox::launch
