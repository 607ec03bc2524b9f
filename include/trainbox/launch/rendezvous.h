// trainbox/launch/rendezvous.h — `--rdzv-backend c10d`: launchers that meet, fail and restart together.
//
// Torch-free, and not torch's TCPStore protocol: newline-delimited JSON over one TCP
// connection per launcher; every message is a type of launch/messages.h (docs/distributed.md,
// "The control channel protocol", has the table, checked against those types).
//   - The launcher whose machine owns --rdzv-endpoint HOST:PORT (it can bind it) hosts a
//     RendezvousServer on a thread of its own; every launcher, that one too, is a
//     ControlClient. When --nnodes have joined, the server assigns node ranks (the hosting
//     launcher is node 0, the others in join order), MASTER_ADDR = node 0's address as it
//     reaches the endpoint (or its --local-addr) and MASTER_PORT = a port node 0 found free.
//   - Heartbeats both ways every heartbeat_interval; heartbeat_timeout of silence (or a
//     closed connection) makes a node lost, and the job stops on every other node.
//   - A worker failure anywhere is reported to the server, which broadcasts one stop with
//     the global root cause; restarts happen as one attempt on every node, after every node
//     reported its workers stopped, with a fresh MASTER_PORT.
// Threading: the server runs its own thread (poll loop) and shares nothing with the caller
// but start and finish. A ControlClient belongs to the launcher's main thread (it never
// blocks except in join(); the launcher polls fd() in its event loop), plus one small thread
// of its own that sends the heartbeats, so a main thread blocked on a full console
// (`| less`) stalls its workers but never makes its node look lost.
//
//   auto server = RendezvousServer::try_host(cfg);          // nullptr: another machine hosts
//   ControlClient ctrl(cfg, /*hosting=*/server != nullptr);
//   Assignment a = ctrl.join(signal_fd, on_signal);         // blocks until all nodes joined
//   … poll(ctrl.fd(), ctrl.poll_events()); for (auto& m : ctrl.service(revents)) …
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/run_config.h>

namespace trainbox::launch {

class RendezvousServer {
 public:
  // Binds cfg.rdzv.host:port if this machine owns that address and the port is free, and
  // starts serving the job (cfg.run_id, cfg.nnodes, cfg.max_restarts). nullptr when the
  // address is not this machine's (EADDRNOTAVAIL) or the port is already taken here
  // (EADDRINUSE: another launcher of this machine hosts, or another job — the join says
  // which), and when HOST does not resolve (the client's join reports that). Throws
  // SystemError when the thread cannot start.
  static std::unique_ptr<RendezvousServer> try_host(const RunConfig& cfg);
  ~RendezvousServer();  // stops the thread at once
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const;  // the bound port (tests bind port 0)
  // Lets queued messages reach the other launchers (at most `linger_s`), then stops.
  void finish(double linger_s);

  struct State;

 private:
  explicit RendezvousServer(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// Elastic: the job ended (exit_code) while this node waited to be admitted.
struct JobEndedWhileWaiting {
  int exit_code = 0;
};

class ControlClient {
 public:
  ControlClient(const RunConfig& cfg, bool hosting, std::string hostname);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Connects to the endpoint (retrying while nobody listens yet), joins, and waits for the
  // assignment, all within join_timeout. `extra_fd` (the launcher's signalfd, or -1) is
  // polled as well; when readable, on_extra() runs and may throw to abandon the join.
  // Throws UsageError naming the endpoint when the join times out or is refused, and
  // JobEndedWhileWaiting when an elastic job that this node waited to enter ended.
  Assignment join(int extra_fd, const std::function<void()>& on_extra);

  int fd() const;
  short poll_events() const;  // POLLIN, plus POLLOUT while output is queued
  // Reads and writes after poll() said `revents`; returns the server's messages (not
  // heartbeats). Sends a due heartbeat. A closed connection, or a message that is not the
  // protocol (ProtocolError: the server is named in lost_server().why), makes server_lost() true.
  std::vector<msg::Message> service(short revents);
  // Milliseconds until service() must run again (next heartbeat, or the silence deadline).
  int timeout_ms() const;
  // The server (node 0, which hosts it) is gone: closed connection or heartbeat_timeout of
  // silence. Checked by service(); describe it with lost_server().
  bool server_lost() const;
  LostNode lost_server() const;
  // Stop treating the server's silence or departure as a loss (the job's end is decided).
  void expect_close();
  void send(const msg::Message& m);
  const Assignment& assignment() const;
  int attempt() const;  // the attempt the join's assignment starts (0, or later for a node admitted later)

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace trainbox::launch
