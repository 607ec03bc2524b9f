// The c10d rendezvous in one process: a RendezvousServer on 127.0.0.1 port 0 and
// ControlClients joining from threads (as launchers on other nodes would): assignments,
// refusals with both values named, timeouts naming the endpoint, and the message pieces.
#include <arpa/inet.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/ports.h>
#include <trainbox/launch/rendezvous.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/unique_fd.h>

#include "launch/rdzv_states.h"

using namespace trainbox;
using namespace trainbox::launch;

namespace {
RunConfig job(int port, int nnodes = 2, std::string id = "job", int nproc = 2) {
  RunConfig c;
  c.rdzv_backend = "c10d";
  c.rdzv.host = "127.0.0.1";
  c.rdzv.port = port;
  c.rdzv.join_timeout_s = 5;
  c.nnodes = nnodes;
  c.nproc_per_node = nproc;
  c.run_id = std::move(id);
  c.command = {"true"};
  return c;
}
// Joins on a thread; the future holds the assignment or the UsageError's message.
std::future<std::string> join_async(RunConfig cfg, bool hosting, std::string host,
                                    std::shared_ptr<ControlClient>* keep = nullptr) {
  auto client = std::make_shared<ControlClient>(cfg, hosting, std::move(host));
  if (keep) *keep = client;
  return std::async(std::launch::async, [client] {
    try {
      Assignment a = client->join(-1, {});
      return nlohmann::json{{"node_rank", a.node_rank},
                            {"world", a.world_size},
                            {"offset", a.rank_offset},
                            {"master", a.master_addr + ":" + std::to_string(a.master_port)}}
          .dump();
    } catch (const UsageError& e) {
      return std::string("UsageError: ") + e.what();
    }
  });
}
}  // namespace

namespace {
UniqueFd connect_loopback(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  timeval tv{5, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}
// A listening socket on 127.0.0.1, port chosen by the kernel: a fake rendezvous server.
UniqueFd listen_loopback(int& port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd.get(), 4) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return UniqueFd();
  port = ntohs(sa.sin_port);
  return fd;
}
// Everything the peer sends until it closes (or 5 s pass).
std::string read_to_eof(int fd) {
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<std::size_t>(n));
  return all;
}
}  // namespace

// The states' transitions (launch/rdzv_states.h), against the lifecycle as docs/decisions.md
// ("Rendezvous states") writes it, pair by pair: every listed move passes, every other is refused
// and leaves the state where it was.
namespace {
template <class State, std::size_t N>
void expect_moves(const std::string_view (&names)[N], const std::vector<std::pair<std::string, std::string>>& legal) {
  for (std::size_t f = 0; f < N; ++f)
    for (std::size_t t = 0; t < N; ++t) {
      const auto from = static_cast<State>(f), to = static_cast<State>(t);
      const bool listed =
          std::find(legal.begin(), legal.end(), std::pair{std::string(names[f]), std::string(names[t])}) != legal.end();
      StateField<State> s{from};
      EXPECT_EQ(s.to(to), listed) << names[f] << " -> " << names[t];
      EXPECT_EQ(s.get(), listed ? to : from) << names[f] << " -> " << names[t];
    }
}
}  // namespace

TEST(RendezvousStates, MemberMovesAreExactlyTheLifecycle) {
  expect_moves<MemberState>(kMemberStateNames, {{"connected", "joined"},
                                                {"connected", "waiting"},
                                                {"waiting", "joined"},  // admitted at a restart boundary
                                                {"joined", "running"},
                                                {"running", "done"},
                                                {"running", "stopped"},
                                                {"done", "stopped"},  // a stop elsewhere after its workers finished
                                                {"stopped", "running"},
                                                {"joined", "gone"},
                                                {"waiting", "gone"},
                                                {"running", "gone"},
                                                {"done", "gone"},
                                                {"stopped", "gone"}});
}

TEST(RendezvousStates, LinkMovesAreExactlyTheLifecycle) {
  expect_moves<LinkState>(kLinkStateNames, {{"up", "lost"},
                                            {"up", "closing"},
                                            {"lost", "closing"},  // the end decided after the loss: no loss any more
                                            {"up", "quit"},
                                            {"lost", "quit"},
                                            {"closing", "quit"}});
}

TEST(RendezvousStates, AnAttemptAndARestartWalkTheTable) {
  StateField<MemberState> m{MemberState::kConnected};
  for (auto s : {MemberState::kJoined, MemberState::kRunning, MemberState::kDone, MemberState::kStopped,
                 MemberState::kRunning, MemberState::kGone})
    EXPECT_TRUE(m.to(s)) << name(s);
  EXPECT_FALSE(m.to(MemberState::kJoined));  // gone is final: a node that comes back joins anew
  EXPECT_EQ(name(m.get()), "gone");
  StateField<LinkState> l{LinkState::kUp};
  EXPECT_TRUE(l.to(LinkState::kClosing));
  EXPECT_FALSE(l.to(LinkState::kLost));  // a departure after the end is decided is no loss
  EXPECT_EQ(name(l.get()), "closing");
}

// The message pieces' own rules (their wire form is test_messages.cpp's).
TEST(Rendezvous, MessagePieces) {
  RootCause c;
  c.signal = 9;
  EXPECT_EQ(c.launcher_exit_code(), 137);
  c.signal = 0;
  c.exit_code = 3;
  EXPECT_EQ(c.launcher_exit_code(), 3);
  LostNode l{1, "n1", "10.0.0.2", 5.25, "no heartbeat for 5 s"};
  EXPECT_EQ(l.describe(), "lost node 1 (n1, 10.0.0.2, last heard 5.2 s ago)");
}

TEST(Rendezvous, NotThisMachinesAddressIsNotHosted) {
  RunConfig c = job(0);
  c.rdzv.host = "192.0.2.1";  // TEST-NET-1: never a local address; binding fails, nothing is sent
  EXPECT_EQ(RendezvousServer::try_host(c), nullptr);
  c.rdzv.host = "nonexistent.invalid";
  EXPECT_EQ(RendezvousServer::try_host(c), nullptr);
  // torchrun's is_host overrides the address test both ways.
  c.rdzv.host = "192.0.2.1";
  c.rdzv.is_host = true;
  auto forced = RendezvousServer::try_host(c);
  ASSERT_NE(forced, nullptr);
  EXPECT_GT(forced->port(), 0);
  c.rdzv.host = "127.0.0.1";
  c.rdzv.is_host = false;
  EXPECT_EQ(RendezvousServer::try_host(c), nullptr);
}

TEST(Rendezvous, TwoNodesGetRanksTheWorldAndNodeZerosAddress) {
  auto server = RendezvousServer::try_host(job(0));
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  ASSERT_GT(port, 0);
  // Node b (3 workers) joins first, but the hosting launcher (2 workers) is node 0.
  auto b = join_async(job(port, 2, "job", 3), false, "b");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto a = join_async(job(port, 2, "job", 2), true, "a");
  auto ja = nlohmann::json::parse(a.get()), jb = nlohmann::json::parse(b.get());
  EXPECT_EQ(ja["node_rank"], 0);
  EXPECT_EQ(jb["node_rank"], 1);
  EXPECT_EQ(ja["world"], 5);
  EXPECT_EQ(jb["offset"], 2);
  EXPECT_EQ(ja["master"], jb["master"]);
  EXPECT_EQ(ja["master"].get<std::string>().rfind("127.0.0.1:", 0), 0u);

  // The job runs: a third launcher with the same id, and one with another id, are refused.
  auto c = join_async(job(port, 2, "job"), false, "c");
  EXPECT_NE(c.get().find(fmt::format("job 'job' is already running with 2 nodes at 127.0.0.1:{}", port)),
            std::string::npos);
  auto d = join_async(job(port, 2, "other"), false, "d");
  EXPECT_NE(d.get().find("belongs to job 'job', not 'other'"), std::string::npos);
}

TEST(Rendezvous, MismatchedNnodesFailsBothNamingBothValues) {
  auto server = RendezvousServer::try_host(job(0, 2));
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  auto a = join_async(job(port, 2), true, "a");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto b = join_async(job(port, 3), false, "b");
  std::string ea = a.get(), eb = b.get();
  for (const auto& e : {ea, eb}) {
    EXPECT_NE(e.find("UsageError"), std::string::npos) << e;
    EXPECT_NE(e.find("--nnodes 3 on b, but --nnodes 2 on a"), std::string::npos) << e;
  }
}

TEST(Rendezvous, TimeoutsNameTheEndpoint) {
  // Nobody listens (a free port, not hosted): connecting fails until join_timeout.
  const int port = pick_free_port();
  RunConfig c = job(port);
  c.rdzv.join_timeout_s = 0.5;
  auto start = std::chrono::steady_clock::now();
  std::string e = join_async(c, false, "x").get();
  EXPECT_NE(e.find(fmt::format("cannot reach the rendezvous at 127.0.0.1:{} within join_timeout=0.5s", port)),
            std::string::npos)
      << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));

  // Hosted, but the second node never comes: the server says how many joined.
  auto server = RendezvousServer::try_host(c);
  ASSERT_NE(server, nullptr);
  e = join_async(c, true, "a").get();
  EXPECT_NE(e.find(fmt::format("only 1 of 2 nodes joined job 'job' at 127.0.0.1:{} within join_timeout=0.5s", port)),
            std::string::npos)
      << e;
}

TEST(Rendezvous, MalformedMessagesAreDroppedAndTheServerKeepsServing) {
  auto server = RendezvousServer::try_host(job(0, 1));
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  for (const char* junk :
       {"{\"type\":\"join\",\"version\":1,\"run_id\":\"job\",\"nnodes\":\"x\"}\n", "not json\n", "[1,2]\n",
        "{\"type\":\"join\",\"version\":1,\"run_id\":\"job\",\"nnodes\":1,\"host\":7}\n"}) {
    UniqueFd fd = connect_loopback(port);
    ASSERT_GT(write(fd.get(), junk, std::strlen(junk)), 0);
    EXPECT_EQ(read_to_eof(fd.get()), "") << junk;  // closed without an answer
  }
  auto a = join_async(job(port, 1), true, "a");  // still serving
  EXPECT_EQ(nlohmann::json::parse(a.get())["node_rank"], 0);
}

// A member that sends a message that is not the protocol is dropped (the server logs it and
// keeps serving); it is not part of the job while joining, so the job still forms.
TEST(Rendezvous, AMemberSendingAMalformedMessageIsDropped) {
  auto server = RendezvousServer::try_host(job(0, 2));
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  UniqueFd raw = connect_loopback(port);
  msg::Join j;
  j.run_id = "job";
  j.nnodes = j.nnodes_max = 2;
  j.host = "raw";
  const std::string join = msg::encode_line(j) + "\n", junk = "{\"type\":\"done\"}\n";
  ASSERT_EQ(write(raw.get(), join.data(), join.size()), static_cast<ssize_t>(join.size()));
  std::string joined;
  for (char c; joined.find('\n') == std::string::npos && read(raw.get(), &c, 1) == 1;) joined += c;
  EXPECT_EQ(joined, "{\"count\":1,\"nnodes\":2,\"note\":\"\",\"type\":\"joined\",\"waiting\":false}\n");
  ASSERT_EQ(write(raw.get(), junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  EXPECT_EQ(read_to_eof(raw.get()), "");  // dropped: closed without a word
  auto a = join_async(job(port, 2), true, "a");
  auto b = join_async(job(port, 2), false, "b");
  EXPECT_EQ(nlohmann::json::parse(a.get())["node_rank"], 0);
  EXPECT_EQ(nlohmann::json::parse(b.get())["node_rank"], 1);
}

// A node that fails at once (its command does not execute) makes the server send the others
// a stop right after their assignment. When both arrive in one read, the join returns the
// assignment and the stop must still reach the launcher: the CI flake where node 0 never
// stopped after node 1's exec error.
TEST(Rendezvous, AStopInTheSameReadAsTheAssignmentIsKept) {
  int port = 0;
  UniqueFd listener = listen_loopback(port);
  ASSERT_TRUE(listener);
  std::jthread fake([&] {  // joined on every way out (the client, declared later, closes first)
    UniqueFd c(accept(listener.get(), nullptr, nullptr));
    msg::Assign a;
    a.assignment.nnodes = 2;
    a.assignment.world_size = 4;
    a.assignment.master_addr = "127.0.0.1";
    a.assignment.master_port = 29500;
    a.assignment.nodes.push_back({0, "h0", "127.0.0.1", 2});
    const msg::AssignedPlace place{1, 2};
    RootCause cause;
    cause.host = "h1";
    cause.node_rank = 0;
    cause.rank = cause.local_rank = -1;
    cause.error_message = "cannot run './tool'";
    const std::string all = msg::encode_line(msg::Joined{2, 2, false, ""}) + "\n" +
                            msg::encode_assign_lines(a, std::span(&place, 1))[0] + "\n" +
                            msg::encode_line(msg::Stop{0, false, cause}) + "\n";
    (void)!write(c.get(), all.data(), all.size());  // one write: one read on the other side
    read_to_eof(c.get());
  });
  auto client = std::make_shared<ControlClient>(job(port), false, "h1");
  Assignment got;
  try {
    got = client->join(-1, {});
  } catch (const UsageError& e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_EQ(got.node_rank, 1);
  EXPECT_EQ(client->timeout_ms(), 0);  // a message in hand: the launcher's poll must not sleep
  const auto msgs = client->service(0);
  ASSERT_EQ(msgs.size(), 1u);
  const auto* stop = std::get_if<msg::Stop>(&msgs[0]);
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(std::get<RootCause>(stop->why).error_message, "cannot run './tool'");
  EXPECT_GT(client->timeout_ms(), 0);
  client.reset();  // closes the connection: the fake server's read ends
  fake.join();
}

// A server that answers with something that is not the protocol: the join fails naming it
// and what was wrong (exit 2 in trainbox run), never an uncaught exception.
TEST(Rendezvous, AMalformedAnswerFailsTheJoinNamingTheServer) {
  int port = 0;
  UniqueFd listener = listen_loopback(port);
  ASSERT_TRUE(listener);
  std::thread fake([&] {
    UniqueFd c(accept(listener.get(), nullptr, nullptr));
    const char answer[] = "{\"type\":\"joined\",\"count\":\"x\",\"nnodes\":2}\n";
    (void)!write(c.get(), answer, sizeof answer - 1);
    char buf[4096];
    timeval tv{5, 0};
    setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (read(c.get(), buf, sizeof buf) > 0) {
    }
  });
  const std::string e = join_async(job(port), false, "x").get();
  fake.join();
  EXPECT_NE(e.find(fmt::format("UsageError: 127.0.0.1:{} answered the join with a malformed message (a 'joined' "
                               "message's 'count' is a string (\"x\"), not an integer): is it a trainbox run "
                               "rendezvous?",
                               port)),
            std::string::npos)
      << e;
}

namespace {
// A raw launcher (the protocol by hand): joins `port`'s elastic job and returns the connection.
UniqueFd raw_join(int port, const RunConfig& cfg, const std::string& host) {
  UniqueFd fd = connect_loopback(port);
  msg::Join j;
  j.run_id = cfg.run_id;
  j.nnodes = cfg.nnodes;
  j.nnodes_max = cfg.nnodes_max;
  j.max_restarts = cfg.max_restarts;
  j.config = cfg.job_digest;
  j.host = host;
  const std::string line = msg::encode_line(j) + "\n";
  EXPECT_EQ(write(fd.get(), line.data(), line.size()), static_cast<ssize_t>(line.size()));
  return fd;
}
// The next line `fd` receives (5 s at most).
std::string next_line(int fd) {
  std::string line;
  for (char c; read(fd, &c, 1) == 1 && c != '\n';) line += c;
  return line;
}
// Serves `client` for `seconds`; the server's messages (heartbeats are dropped by service()).
std::vector<msg::Message> serve_for(ControlClient& client, double seconds) {
  std::vector<msg::Message> got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{client.fd(), client.poll_events(), 0};
    poll(&p, 1, 20);
    for (auto& m : client.service(p.revents)) got.push_back(std::move(m));
  }
  return got;
}
}  // namespace

// --nnodes 1:2: the job starts with MIN after last_call; a node that joins and leaves while
// waiting (three times, each gone before last_call settles) restarts nothing; one that stays
// is admitted by one restart (stop "admit", then a new `assign` of world 2 at attempt 1).
TEST(Rendezvous, ElasticFlappingNodesCauseNoRestartAndAStayingOneIsAdmitted) {
  RunConfig cfg = job(0, 1, "el", 1);
  cfg.nnodes_max = 2;
  cfg.max_restarts = 3;
  cfg.rdzv.last_call_s = 0.3;
  cfg.rdzv.admit_backoff_s = 0.05;
  auto server = RendezvousServer::try_host(cfg);
  ASSERT_NE(server, nullptr);
  cfg.rdzv.port = server->port();
  ControlClient a(cfg, true, "a");
  const Assignment first = a.join(-1, {});  // alone: MIN is 1, after last_call
  EXPECT_EQ(first.world_size, 1);
  EXPECT_EQ(a.attempt(), 0);
  for (int flap = 0; flap < 3; ++flap) {
    UniqueFd b = raw_join(cfg.rdzv.port, cfg, "b");
    const auto joined = nlohmann::json::parse(next_line(b.get()));
    EXPECT_EQ(joined["type"], "joined");
    EXPECT_EQ(joined["waiting"], true) << "the job runs: b waits for the next restart boundary";
    // gone again at once (before last_call settles)
  }
  for (const auto& m : serve_for(a, 1.0))
    EXPECT_FALSE(std::holds_alternative<msg::Stop>(m)) << "a flapping node restarted the job: " << msg::encode_line(m);
  UniqueFd b = raw_join(cfg.rdzv.port, cfg, "b");
  EXPECT_EQ(nlohmann::json::parse(next_line(b.get()))["waiting"], true);
  std::optional<msg::Stop> stop;
  for (int i = 0; i < 100 && !stop; ++i)
    for (auto& m : serve_for(a, 0.05))
      if (auto* s = std::get_if<msg::Stop>(&m)) stop = *s;
  ASSERT_TRUE(stop.has_value()) << "the staying node was never admitted";
  EXPECT_TRUE(stop->restart);
  ASSERT_TRUE(std::holds_alternative<msg::Admitting>(stop->why));
  EXPECT_EQ(std::get<msg::Admitting>(stop->why).hosts, std::vector<std::string>{"b"});
  a.send(msg::Stopped{0, 4242});
  std::optional<msg::Assign> next;
  for (int i = 0; i < 100 && !next; ++i)
    for (auto& m : serve_for(a, 0.05))
      if (auto* s = std::get_if<msg::Assign>(&m)) next = *s;
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->attempt, 1);
  EXPECT_EQ(next->assignment.world_size, 2);
  EXPECT_EQ(next->assignment.node_rank, 0);
  const auto b_assign = nlohmann::json::parse(next_line(b.get()));
  EXPECT_EQ(b_assign["type"], "assign");
  EXPECT_EQ(b_assign["node_rank"], 1);
  EXPECT_EQ(b_assign["attempt"], 1);
  EXPECT_EQ(b_assign["master_port"], 4242);
}

// --- the admission back-off (rdzv_server.cpp, admit_waiting; docs/distributed.md, "Membership") ---
// A waiting node is admitted once no node arrived for last_call AND admit_backoff × 2^changes
// (at most 60 s) has passed since the current attempt began; never once --max-restarts is used up.
// The waits are checked as lower bounds that causality guarantees, never as upper bounds: the
// reference instant is taken on this side *before* the message that starts the server's clock
// is sent, and the stop is read after the server sent it, so a slow machine can only make the
// measured interval longer. The negative check (no admission past --max-restarts) counts the
// server's heartbeats, sent every 0.1 s by the same loop that runs the admission pass.
namespace {
using TestClock = std::chrono::steady_clock;
double seconds_since(TestClock::time_point t) { return std::chrono::duration<double>(TestClock::now() - t).count(); }
// --nnodes 1:MAX on loopback, heartbeats every 0.1 s, no node lost to silence within a test.
RunConfig admission_job(int max_nodes, int max_restarts, double last_call_s, double backoff_s) {
  RunConfig cfg = job(0, 1, "backoff", 1);
  cfg.nnodes_max = max_nodes;
  cfg.max_restarts = max_restarts;
  cfg.rdzv.last_call_s = last_call_s;
  cfg.rdzv.admit_backoff_s = backoff_s;
  cfg.rdzv.heartbeat_interval_s = 0.1;
  cfg.rdzv.heartbeat_timeout_s = 60;
  cfg.rdzv.join_timeout_s = 30;
  return cfg;
}
// Serves `a` until it receives a message of type T (at most `limit_s`).
template <class T>
std::optional<T> next_of(ControlClient& a, double limit_s) {
  const auto t0 = TestClock::now();
  while (seconds_since(t0) < limit_s)
    for (auto& m : serve_for(a, 0.02))
      if (auto* x = std::get_if<T>(&m)) return *x;
  return std::nullopt;
}
// The next line of a raw node that is not a heartbeat.
nlohmann::json next_message(int fd) {
  for (;;) {
    const std::string line = next_line(fd);
    if (line.empty()) return nullptr;  // closed, or 5 s of silence
    auto j = nlohmann::json::parse(line);
    if (j["type"] != "heartbeat") return j;
  }
}
std::vector<std::string> admitted(const std::optional<msg::Stop>& s) {
  if (!s || !std::holds_alternative<msg::Admitting>(s->why)) return {};
  return std::get<msg::Admitting>(s->why).hosts;
}
}  // namespace

// The back-off runs from the start of the attempt, and doubles with each change of membership:
// b waits admit_backoff (0.6 s) after attempt 0 began; once b is in (one change), c waits
// 2 × 0.6 s after attempt 1 began. Both are admitted (not "never"), each by one restart.
TEST(Rendezvous, ElasticAdmissionWaitsTheBackOffFromTheAttemptsStartDoublingWithEachChange) {
  constexpr double kBackoff = 0.6;
  RunConfig cfg = admission_job(3, 5, 0.05, kBackoff);
  auto server = RendezvousServer::try_host(cfg);
  ASSERT_NE(server, nullptr);
  cfg.rdzv.port = server->port();
  ControlClient a(cfg, true, "a");
  const auto before_attempt0 = TestClock::now();  // attempt 0 begins after a's join arrives
  ASSERT_EQ(a.join(-1, {}).world_size, 1);
  UniqueFd b = raw_join(cfg.rdzv.port, cfg, "b");
  EXPECT_EQ(next_message(b.get())["waiting"], true);
  const auto first = next_of<msg::Stop>(a, 20);
  const double first_s = seconds_since(before_attempt0);
  ASSERT_TRUE(first.has_value()) << "b was never admitted";
  EXPECT_EQ(admitted(first), std::vector<std::string>{"b"});
  EXPECT_GE(first_s, kBackoff) << "b was admitted before admit_backoff had passed since attempt 0 began";

  const auto before_attempt1 = TestClock::now();  // attempt 1 begins after this stopped arrives
  a.send(msg::Stopped{0, 4242});
  const auto assign = next_of<msg::Assign>(a, 20);
  ASSERT_TRUE(assign.has_value());
  EXPECT_EQ(assign->attempt, 1);
  EXPECT_EQ(assign->assignment.world_size, 2);
  EXPECT_EQ(next_message(b.get())["type"], "assign");
  UniqueFd c = raw_join(cfg.rdzv.port, cfg, "c");
  EXPECT_EQ(next_message(c.get())["waiting"], true);
  const auto second = next_of<msg::Stop>(a, 20);
  const double second_s = seconds_since(before_attempt1);
  ASSERT_TRUE(second.has_value()) << "after one change of membership, c was never admitted";
  EXPECT_EQ(second->attempt, 1);
  EXPECT_EQ(admitted(second), std::vector<std::string>{"c"});
  EXPECT_GE(second_s, 2 * kBackoff) << "the back-off did not double after one change of membership";
}

// Arrivals settle first: a node is admitted no sooner than last_call after it arrived, even when
// the back-off (0.05 s) has long passed.
TEST(Rendezvous, ElasticAdmissionWaitsLastCallAfterTheLatestArrival) {
  constexpr double kLastCall = 1.0;
  RunConfig cfg = admission_job(2, 5, kLastCall, 0.05);
  auto server = RendezvousServer::try_host(cfg);
  ASSERT_NE(server, nullptr);
  cfg.rdzv.port = server->port();
  ControlClient a(cfg, true, "a");
  ASSERT_EQ(a.join(-1, {}).world_size, 1);  // alone, after last_call
  const auto before_b = TestClock::now();   // b's arrival is after this
  UniqueFd b = raw_join(cfg.rdzv.port, cfg, "b");
  EXPECT_EQ(next_message(b.get())["waiting"], true);
  const auto stop = next_of<msg::Stop>(a, 20);
  const double waited = seconds_since(before_b);
  ASSERT_TRUE(stop.has_value()) << "b was never admitted";
  EXPECT_EQ(admitted(stop), std::vector<std::string>{"b"});
  EXPECT_GE(waited, kLastCall) << "b was admitted before arrivals had settled for last_call";
}

// Each admission is a restart and counts against --max-restarts: with 1, b's admission uses it
// up, and c then waits for good while the job runs on (no stop, no assign for c) through 20 of
// the server's 0.1 s ticks, 10× its back-off (0.05 × 2) plus last_call (0.05).
TEST(Rendezvous, ElasticAdmissionStopsOnceMaxRestartsIsUsedUp) {
  RunConfig cfg = admission_job(3, 1, 0.05, 0.05);
  auto server = RendezvousServer::try_host(cfg);
  ASSERT_NE(server, nullptr);
  cfg.rdzv.port = server->port();
  ControlClient a(cfg, true, "a");
  ASSERT_EQ(a.join(-1, {}).world_size, 1);
  UniqueFd b = raw_join(cfg.rdzv.port, cfg, "b");
  EXPECT_EQ(next_message(b.get())["waiting"], true);
  const auto stop = next_of<msg::Stop>(a, 20);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(admitted(stop), std::vector<std::string>{"b"});
  a.send(msg::Stopped{0, 4242});
  ASSERT_TRUE(next_of<msg::Assign>(a, 20).has_value());
  EXPECT_EQ(next_message(b.get())["type"], "assign");
  UniqueFd c = raw_join(cfg.rdzv.port, cfg, "c");
  EXPECT_EQ(next_message(c.get())["waiting"], true);
  int beats = 0;
  nlohmann::json other;
  while (beats < 20 && other.is_null()) {
    const std::string line = next_line(c.get());
    if (line.empty()) break;  // closed, or 5 s of silence
    auto j = nlohmann::json::parse(line);
    j["type"] == "heartbeat" ? void(++beats) : void(other = std::move(j));
  }
  EXPECT_GE(beats, 20) << "the server's heartbeats stopped";
  EXPECT_TRUE(other.is_null()) << "c, past --max-restarts 1, got: " << other.dump();
  for (const auto& m : serve_for(a, 0.05))  // what the same ticks sent a, already in its socket
    EXPECT_FALSE(std::holds_alternative<msg::Stop>(m)) << "admitted past --max-restarts: " << msg::encode_line(m);
}
