// trainbox/launch/ports.h — the master port: pick a free one, or prove the given one is free.
//
// Rank 0's c10d TCPStore listens on MASTER_PORT on every interface. When that port is taken,
// torch fails minutes later with "address already in use" and no address (pytorch#72816);
// the launcher checks first and names the address, the port and, when it can, the holder.
// Both functions close their probe socket before returning: nothing stays bound.
//
//   int port = pick_free_port();                    // --standalone
//   check_port_available("127.0.0.1", 29500);       // throws UsageError when in use
#pragma once
#include <string>

namespace trainbox::launch {

// A TCP port that was free on `host` a moment ago (bind port 0, read it back, close).
int pick_free_port(const std::string& host = "127.0.0.1");

// Throws UsageError when `port` cannot be bound on `addr` (when it is this machine's) or on
// the wildcard address the TCPStore listens on. Binds with SO_REUSEADDR like the TCPStore, so
// a port in TIME_WAIT from a previous run counts as free. An unresolvable `addr` only warns.
void check_port_available(const std::string& addr, int port);

// "pid 1234 (python3)" for the local process listening on / bound to `port`, "" if unknown
// (other users' processes are invisible without privileges).
std::string describe_port_holder(int port);

}  // namespace trainbox::launch
