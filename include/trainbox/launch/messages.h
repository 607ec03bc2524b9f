// trainbox/launch/messages.h — the c10d control channel's messages (kRdzvProtocolVersion below), typed.
//
// One struct per message kind, each declaring its wire name (kType), who sends it to whom
// (kRoute) and its top-level fields (kFields); docs/distributed.md, "The control channel
// protocol (version N)", is checked against kProtocol and N against kRdzvProtocolVersion by a
// unit test (test_messages.cpp).
// encode() and decode() are the only code that reads or writes a message's JSON: one pair for
// every kind, driven by the same field list, so the two cannot disagree. decode() is strict:
// a missing field, a field of the wrong type or out of range, an unknown type or a line that
// is not a JSON object throws ProtocolError saying which message and field; the caller adds
// the peer (the server drops that launcher with a log line, a launcher stops naming the
// server). The wire format is the same as before the types: same keys, same version.
// Torch-free; no state, thread-safe.
//
//   std::string line = encode_line(msg::Done{3});             // {"attempt":3,"type":"done"}
//   msg::Message m = decode_line(line);                         // throws ProtocolError
//   if (auto* d = std::get_if<msg::Done>(&m)) use(d->attempt);
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <trainbox/launch/stall.h>
#include <trainbox/util/errors.h>

namespace trainbox::launch {

// trainbox run's exit code on the surviving nodes when a node of a c10d job is lost.
// 125: not a worker's code (those are < 125 in practice, or 128 + signal), and what tools
// like `docker run` use for "the runner itself failed".
inline constexpr int kExitNodeLost = 125;
// Protocol version in the join message; a server refuses any other. 2: elastic membership
// (join's nnodes_max, trainbox_version and config; joined's waiting; stop's reason "admit").
// 3: join's config is the job digest of launch/job_digest.h; joined's note.
inline constexpr int kRdzvProtocolVersion = 3;

// The first worker failure of the job, as the failing node's launcher saw it.
struct RootCause {
  std::string host;
  int node_rank = 0, rank = 0, local_rank = 0;
  long long pid = 0;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal killed it (then exit_code is unused)
  std::int64_t time = 0;
  std::vector<std::string> stderr_tail;
  std::string error_file, error_message, traceback;  // from its TORCHELASTIC_ERROR_FILE, if any

  // trainbox run's exit code for it: the exit code, or 128 + signal.
  int launcher_exit_code() const { return signal ? 128 + signal : exit_code; }
  bool operator==(const RootCause&) const = default;
};

struct NodeInfo {
  int node_rank = 0;
  std::string host, addr;  // host name, and the address the others reach it at
  int nproc = 1;
  bool operator==(const NodeInfo&) const = default;
};

// What the rendezvous decided for this node.
struct Assignment {
  int node_rank = 0, nnodes = 1, world_size = 1, rank_offset = 0;
  std::string master_addr;
  int master_port = 0;
  std::vector<NodeInfo> nodes;  // node 0 (the rendezvous's host): a launcher needs no other
  bool operator==(const Assignment&) const = default;
};

// "lost node 1 (host, 10.0.0.2, last heard 5.2 s ago)".
struct LostNode {
  int node_rank = -1;
  std::string host, addr;
  double last_heard_s = 0;
  std::string why;  // "no heartbeat for 5 s" / "its launcher closed the connection"
  std::string describe() const;
  bool operator==(const LostNode&) const = default;
};

// A message that is not this protocol (kRdzvProtocolVersion): not JSON, not an object, no or an unknown
// "type", a missing field, a field of the wrong type. what(): "a 'join' message without
// 'nnodes'"; the receiver names the peer it came from.
struct ProtocolError : DistError {
  explicit ProtocolError(const std::string& what)
      : DistError(what,
                  "run the same trainbox version on every node, and point --rdzv-endpoint at a trainbox run "
                  "rendezvous") {}
};

namespace msg {

// This build's version (CMake's project version), as a join carries it.
std::string_view trainbox_version_text();

// Who sends a kind to whom; route_text() is the docs table's first column.
enum class Route { kLauncherToServer, kServerToLauncher, kServerToLaunchers, kBothWays, kRelayed };
std::string_view route_text(Route r);

// --- joining ---
struct Join {
  static constexpr std::string_view kType = "join";
  static constexpr Route kRoute = Route::kLauncherToServer;
  static constexpr std::array<std::string_view, 14> kFields = {
      "version",    "run_id",  "nnodes",    "nnodes_max", "max_restarts",     "nproc", "host", "addr",
      "addr_given", "hosting", "free_port", "pid",        "trainbox_version", "config"};
  int version = kRdzvProtocolVersion;
  std::string run_id;
  int nnodes = 1, nnodes_max = 1, max_restarts = 0, nproc = 1;  // nnodes: MIN of --nnodes MIN:MAX
  std::string host, addr;                                       // addr: its end of this connection, or --local-addr
  bool addr_given = false;                                      // addr is --local-addr
  bool hosting = false;                                         // it hosts the server: node 0
  int free_port = 0;                                            // the hosting one's: the first MASTER_PORT
  long long pid = 0;
  std::string trainbox_version = std::string(trainbox_version_text());
  std::string config;  // the job's config digest (launch/run_config.h, job_digest): the worker command and its files
  bool operator==(const Join&) const = default;
};
struct Joined {
  static constexpr std::string_view kType = "joined";
  static constexpr Route kRoute = Route::kServerToLauncher;
  static constexpr std::array<std::string_view, 4> kFields = {"count", "nnodes", "waiting", "note"};
  int count = 0, nnodes = 1;
  bool waiting = false;  // elastic: the job runs; this node is admitted at the next restart boundary
  std::string note;      // how this node's worker command differs from the hosting node's, where it may; "" = not
  bool operator==(const Joined&) const = default;
};
struct Refuse {
  static constexpr std::string_view kType = "refuse";
  static constexpr Route kRoute = Route::kServerToLauncher;
  static constexpr std::array<std::string_view, 2> kFields = {"message", "hint"};
  std::string message, hint;
  bool operator==(const Refuse&) const = default;
};
struct Abort {
  static constexpr std::string_view kType = "abort";
  static constexpr Route kRoute = Route::kServerToLaunchers;
  static constexpr std::array<std::string_view, 2> kFields = {"message", "hint"};
  std::string message, hint;
  bool operator==(const Abort&) const = default;
};
struct Assign {
  static constexpr std::string_view kType = "assign";
  static constexpr Route kRoute = Route::kServerToLaunchers;
  static constexpr std::array<std::string_view, 8> kFields = {"node_rank",   "nnodes",      "world_size", "rank_offset",
                                                              "master_addr", "master_port", "attempt",    "nodes"};
  Assignment assignment;
  int attempt = 0;
  bool operator==(const Assign&) const = default;
};

// --- running ---
struct Heartbeat {
  static constexpr std::string_view kType = "heartbeat";
  static constexpr Route kRoute = Route::kBothWays;
  static constexpr std::array<std::string_view, 0> kFields = {};
  bool operator==(const Heartbeat&) const = default;
};
struct Failed {
  static constexpr std::string_view kType = "failed";
  static constexpr Route kRoute = Route::kLauncherToServer;
  static constexpr std::array<std::string_view, 2> kFields = {"attempt", "cause"};
  int attempt = 0;
  RootCause cause;  // rank -1: its launcher could not start its workers
  bool operator==(const Failed&) const = default;
};
struct Interrupted {
  static constexpr std::string_view kType = "interrupted";
  static constexpr Route kRoute = Route::kLauncherToServer;
  static constexpr std::array<std::string_view, 2> kFields = {"attempt", "signal"};
  int attempt = 0, signal = 0;
  bool operator==(const Interrupted&) const = default;
};
struct Done {
  static constexpr std::string_view kType = "done";
  static constexpr Route kRoute = Route::kLauncherToServer;
  static constexpr std::array<std::string_view, 1> kFields = {"attempt"};
  int attempt = 0;
  bool operator==(const Done&) const = default;
};
struct Stopped {
  static constexpr std::string_view kType = "stopped";
  static constexpr Route kRoute = Route::kLauncherToServer;
  static constexpr std::array<std::string_view, 2> kFields = {"attempt", "free_port"};
  int attempt = 0;
  int free_port = 0;  // node 0's, for the next attempt's MASTER_PORT
  bool operator==(const Stopped&) const = default;
};
// Elastic: nodes that joined while the job ran are admitted; every node restarts at the new world.
struct Admitting {
  std::vector<std::string> hosts;
  bool operator==(const Admitting&) const = default;
};
// Why the job stops: `reason` on the wire is "failure", "lost", "signal" or "admit", by which of these it holds.
struct SignalElsewhere {
  int signal = 0, node_rank = -1;
  std::string host;
  bool operator==(const SignalElsewhere&) const = default;
};
struct Stop {
  static constexpr std::string_view kType = "stop";
  static constexpr Route kRoute = Route::kServerToLaunchers;
  // Every key a stop may carry: cause with reason failure, lost with lost, the last three with signal.
  static constexpr std::array<std::string_view, 9> kFields = {"attempt", "reason",    "restart", "cause", "lost",
                                                              "signal",  "node_rank", "host",    "admit"};
  int attempt = 0;
  bool restart = false;  // a new attempt follows (a failure; elastic: a lost node, an admission)
  std::variant<RootCause, LostNode, SignalElsewhere, Admitting> why;
  bool operator==(const Stop&) const = default;
};
struct Start {
  static constexpr std::string_view kType = "start";
  static constexpr Route kRoute = Route::kServerToLaunchers;
  static constexpr std::array<std::string_view, 2> kFields = {"attempt", "master_port"};
  int attempt = 0, master_port = 0;
  bool operator==(const Start&) const = default;
};
struct End {
  static constexpr std::string_view kType = "end";
  static constexpr Route kRoute = Route::kServerToLaunchers;
  static constexpr std::array<std::string_view, 1> kFields = {"exit_code"};
  int exit_code = 0;
  bool operator==(const End&) const = default;
};
// A node's ranks (progress and kernel view) for the others' stall verdicts; the server relays it.
struct Ranks {
  static constexpr std::string_view kType = "ranks";
  static constexpr Route kRoute = Route::kRelayed;
  static constexpr std::array<std::string_view, 4> kFields = {"attempt", "node_rank", "host", "ranks"};
  int attempt = 0, node_rank = 0;
  std::string host;
  std::vector<RankProgress> ranks;  // who, reporting, finished, step, phase, idle_s, reporting_s, kernel
  bool operator==(const Ranks&) const = default;
};

using Message = std::variant<Join, Joined, Refuse, Abort, Assign, Heartbeat, Failed, Interrupted, Done, Stopped, Stop,
                             Start, End, Ranks>;

// The protocol table: one row per kind, in the variant's order.
struct KindSpec {
  std::string_view type;
  Route route;
  std::span<const std::string_view> fields;
};
template <class... Kinds>
constexpr auto make_protocol(std::variant<Kinds...>*) {
  return std::array<KindSpec, sizeof...(Kinds)>{KindSpec{Kinds::kType, Kinds::kRoute, Kinds::kFields}...};
}
inline constexpr auto kProtocol = make_protocol(static_cast<Message*>(nullptr));
static_assert(kProtocol.size() == 14, "a new kind needs its row in docs/distributed.md's protocol table");

std::string_view type_of(const Message& m);
nlohmann::json encode(const Message& m);
// Throws ProtocolError (never another exception).
Message decode(const nlohmann::json& j);
// One line of the channel, without the newline: compact JSON (invalid UTF-8 replaced).
std::string encode_line(const Message& m);
// Throws ProtocolError, also for a line that is not JSON.
Message decode_line(std::string_view line);

// Where one node sits in the job: all that differs between the N `assign` lines of a rendezvous.
struct AssignedPlace {
  int node_rank = 0, rank_offset = 0;
};
// encode_line(a) for each place (a.assignment's node_rank and rank_offset taken from it), byte
// for byte, with the shared part — the node list, O(N) — encoded once instead of N times.
std::vector<std::string> encode_assign_lines(const Assign& a, std::span<const AssignedPlace> places);

}  // namespace msg
}  // namespace trainbox::launch
