// src/launch/channel.h (private) — the control channel's transport: newline-delimited JSON over TCP.
//
// One message (launch/messages.h) per line, UTF-8, at most kMaxMessage bytes. Sockets are non-blocking and
// driven by the owner's poll(): receive() reads what is there and returns whole messages;
// send() writes what the kernel takes and keeps the rest for flush() on POLLOUT, so neither
// side can block the other. TCP_NODELAY (messages are tiny and latency is the point). No TCP
// keepalive: a cut link (no RST) is found by the protocol's heartbeat timeout, in seconds,
// not by TCP's retransmission timeout, in minutes.
//
// A line that does not decode (msg::decode_line's ProtocolError) closes the channel with
// malformed() true and the decoder's words as error(); the owner names the peer.
//
//   JsonChannel ch(connect_tcp("node1", 29400, deadline, err));
//   ch.send(msg::Heartbeat{});
//   std::vector<msg::Message> in;
//   if (!ch.receive(in)) puts(ch.error().c_str());   // closed: EOF, error or a malformed message
#pragma once
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <trainbox/launch/messages.h>
#include <trainbox/util/unique_fd.h>

namespace trainbox::launch {

class JsonChannel {
 public:
  // 1 MiB: a root cause with 20 stderr lines is a few KiB; anything bigger is not ours.
  static constexpr std::size_t kMaxMessage = 1 << 20;

  JsonChannel() = default;
  explicit JsonChannel(UniqueFd fd);
  int fd() const { return fd_.get(); }
  explicit operator bool() const { return static_cast<bool>(fd_); }
  // Queues the message's line and writes what the socket takes now. false once the channel is closed.
  bool send(const msg::Message& m);
  // The same for a line already encoded (msg::encode_line, no newline): a broadcast encodes once.
  bool send_line(std::string_view line);
  bool wants_write() const { return !out_.empty(); }
  // Writes queued bytes (call on POLLOUT). false once the channel is closed.
  bool flush();
  // Reads what is available and appends complete messages to `out`. false (and closed) at
  // EOF, on a socket error, or on a line that is not a message (then malformed()).
  bool receive(std::vector<msg::Message>& out);
  void close(const std::string& why = "closed");
  const std::string& error() const { return error_; }
  bool malformed() const { return malformed_; }

 private:
  UniqueFd fd_;
  std::string in_, out_, error_;
  bool malformed_ = false;
};

using Deadline = std::chrono::steady_clock::time_point;

// A non-blocking TCP connection to host:port, made before `deadline` (one attempt: the
// caller retries). Empty UniqueFd and `err` set when it fails ("Connection refused", a
// resolver error, "timed out").
// While it waits, a readable `extra_fd` (the launcher's signalfd) runs on_extra, which may throw.
UniqueFd connect_tcp(const std::string& host, int port, Deadline deadline, std::string& err, int extra_fd = -1,
                     const std::function<void()>& on_extra = {});
// This end's / the other end's address of a connected socket, numeric ("10.0.0.2", "::1").
std::string local_address(int fd);
std::string peer_address(int fd);
// Milliseconds until `deadline`, at least 0 and at most `cap_ms`.
int ms_until(Deadline deadline, int cap_ms = 1 << 30);

}  // namespace trainbox::launch
