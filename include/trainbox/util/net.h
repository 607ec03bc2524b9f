// trainbox/util/net.h — which local interface reaches a peer, asked of the kernel's routing
// table (a UDP socket connect() + getsockname(): nothing is sent), and the interface's name
// from getifaddrs(); and this machine's host name, the one helper every log line, report and
// lock file uses. Torch-free; used by the workers' process groups (Gloo binds that address,
// NCCL is told that interface) and by the launcher.
//
// Why: across real hosts Gloo, left alone, resolves the machine's hostname; where that fails it
// falls back to 127.0.0.1 and the peers get "Connection refused". The interface that routes to
// MASTER_ADDR is the one the job's traffic must use.
//
//   if (auto r = route_to("198.18.0.1")) printf("%s via %s\n", r->address.c_str(), r->interface.c_str());
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace trainbox {

struct Route {
  std::string address;    // this machine's source address toward the peer, e.g. "198.18.0.2"
  std::string interface;  // its interface, e.g. "eth0" ("" if getifaddrs does not list it)
};

// host: an IPv4/IPv6 address or a resolvable name. nullopt when it does not resolve or no
// route leads there.
std::optional<Route> route_to(const std::string& host);

// Can this machine open a TCP connection to host:port? "" when it can, else why not
// ("connection refused", "no answer within 10 s", "no route to host", "does not resolve").
// A refused connection is retried until the deadline (the server may not be up yet); the
// connection is closed at once.
std::string tcp_reach(const std::string& host, int port, double timeout_s);

// The one loopback rule (the launcher's rendezvous, the dashboard's token rule, the workers'
// interface choice): "localhost", an IPv4 address in 127.0.0.0/8 (Debian's 127.0.1.1 too), the
// IPv6 ::1 in any spelling, and an IPv4-mapped ::ffff:127.x.y.z. Addresses are parsed
// (inet_pton), not matched by prefix: "127.example.com" is a name, and not loopback.
bool is_loopback_host(std::string_view host);

// gethostname(), or `fallback` when it fails or is empty (TensorBoard's file names want
// "localhost", the launcher's log lines "?").
std::string host_name(const std::string& fallback = "");

}  // namespace trainbox
