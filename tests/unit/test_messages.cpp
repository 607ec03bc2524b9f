// The control channel's typed messages (launch/messages.h): every kind round-trips through its
// line; the encoding writes exactly the declared fields; each malformed case is a
// ProtocolError with words that say what is wrong; and docs/distributed.md's protocol table
// says what the code does.
#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <trainbox/launch/messages.h>

using namespace trainbox::launch;
using nlohmann::json;

namespace {

RootCause a_cause() {
  return RootCause{.host = "n1",
                   .node_rank = 1,
                   .rank = 3,
                   .local_rank = 1,
                   .pid = 4242,
                   .signal = 9,
                   .time = 1700000000,
                   .stderr_tail = {"Traceback", "ValueError: x"},
                   .error_file = "/tmp/e.json",
                   .error_message = "ValueError: x",
                   .traceback = "  File \"train.py\", line 3"};
}

// The heartbeat path does not travel, nor what the receiver fills in (remote, node_rank, host).
RankProgress a_rank() {
  const KernelView stopped{true, 'T', false, "do_signal_stop", "", 0, 4.1, 0, 4.1, 0};
  return RankProgress{.who = {3, 1, 4242, ""},
                      .reporting = true,
                      .step = 40,
                      .phase = "allreduce",
                      .idle_s = 5.25,
                      .reporting_s = 30,
                      .kernel = stopped,
                      .host = ""};
}

// One message of every kind, with non-default values where the kind has fields.
std::vector<msg::Message> one_of_each() {
  msg::Join join{2, "job42", 2, 3, 1, 4, "b", "10.0.0.2", true, false, 0, 77, "0.1.0", "command=00ff file:a.toml=01"};
  Assignment a;
  a.node_rank = 1;
  a.nnodes = 2;
  a.world_size = 6;
  a.rank_offset = 2;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.nodes = {{0, "a", "10.0.0.1", 2}, {1, "b", "10.0.0.2", 4}};
  return {join,
          msg::Joined{1, 2, true, "--run-dir a on b, but --run-dir c on d"},
          msg::Refuse{"no", "do this"},
          msg::Abort{"gone", "do that"},
          msg::Assign{a, 0},
          msg::Heartbeat{},
          msg::Failed{2, a_cause()},
          msg::Interrupted{0, 15},
          msg::Done{3},
          msg::Stopped{1, 40000},
          msg::Stop{1, true, a_cause()},
          msg::Start{2, 41000},
          msg::End{0},
          msg::Ranks{0, 1, "b", {a_rank()}}};
}

std::string what_of(const std::string& line) {
  try {
    msg::decode_line(line);
  } catch (const ProtocolError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a ProtocolError: ") + e.what();
  }
  return "decoded";
}

}  // namespace

TEST(Messages, EveryKindRoundTripsThroughItsLine) {
  const auto all = one_of_each();
  std::set<std::string_view> kinds;
  for (const auto& m : all) {
    kinds.insert(msg::type_of(m));
    const std::string line = msg::encode_line(m);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    EXPECT_EQ(msg::decode_line(line), m) << line;
    EXPECT_EQ(json::parse(line)["type"], std::string(msg::type_of(m)));
  }
  EXPECT_EQ(kinds.size(), msg::kProtocol.size());  // one of each
  for (const auto& stop :
       {msg::Stop{2, false, LostNode{1, "b", "10.0.0.2", 5.25, "no heartbeat for 5 s"}},
        msg::Stop{2, false, msg::SignalElsewhere{2, 1, "b"}}, msg::Stop{3, true, msg::Admitting{{"c", "d"}}}})
    EXPECT_EQ(msg::decode_line(msg::encode_line(stop)), msg::Message(stop));
}

TEST(Messages, TheWireIsAsBeforeTheTypes) {
  EXPECT_EQ(msg::encode_line(msg::Heartbeat{}), R"({"type":"heartbeat"})");
  EXPECT_EQ(msg::encode_line(msg::Done{3}), R"({"attempt":3,"type":"done"})");
  EXPECT_EQ(msg::encode_line(msg::Stopped{1, 0}), R"({"attempt":1,"free_port":0,"type":"stopped"})");
  EXPECT_EQ(msg::encode_line(msg::Stop{2, false, msg::SignalElsewhere{15, 1, "b"}}),
            R"({"attempt":2,"host":"b","node_rank":1,"reason":"signal","restart":false,"signal":15,"type":"stop"})");
  const json lost = msg::encode(msg::Stop{0, false, LostNode{1, "b", "10.0.0.2", 5.5, "why"}});
  EXPECT_EQ(lost["reason"], "lost");
  EXPECT_EQ(lost["lost"]["last_heard_s"], 5.5);
  EXPECT_FALSE(lost.contains("cause"));
  EXPECT_EQ(msg::encode(msg::Ranks{0, 1, "b", {a_rank()}})["ranks"][0]["kernel"]["state"], "T");
}

TEST(Messages, EncodingWritesExactlyTheDeclaredFields) {
  for (const auto& m : one_of_each()) {
    const json j = msg::encode(m);
    std::set<std::string> written;
    for (const auto& [k, v] : j.items())
      if (k != "type") written.insert(k);
    const auto& spec = msg::kProtocol[m.index()];
    ASSERT_EQ(spec.type, msg::type_of(m));
    const std::set<std::string> declared(spec.fields.begin(), spec.fields.end());
    if (spec.type == "stop") {  // the reason's own fields only
      EXPECT_TRUE(std::includes(declared.begin(), declared.end(), written.begin(), written.end()));
    } else {
      EXPECT_EQ(written, declared) << spec.type;
    }
    // and each declared field is required
    for (const auto& f : written) {
      json less = j;
      less.erase(f);
      EXPECT_NE(what_of(less.dump()).find("without '" + f + "'"), std::string::npos) << spec.type << " " << f;
    }
  }
}

TEST(Messages, MalformedLinesAreProtocolErrorsThatSayWhatIsWrong) {
  EXPECT_EQ(what_of("not json"), "a line that is not JSON");
  EXPECT_EQ(what_of("[1,2]"), "a message that is a JSON array, not an object");
  EXPECT_EQ(what_of(R"({"attempt":1})"), "a message without a 'type'");
  EXPECT_EQ(what_of(R"({"type":7})"), "a message without a 'type'");
  EXPECT_EQ(what_of(R"({"type":"bogus"})"), "a message of unknown type 'bogus'");
  EXPECT_EQ(what_of(R"({"type":"done"})"), "a 'done' message without 'attempt'");
  EXPECT_EQ(what_of(R"({"type":"done","attempt":"x"})"),
            R"(a 'done' message's 'attempt' is a string ("x"), not an integer)");
  EXPECT_EQ(what_of(R"({"type":"done","attempt":1.5})"),
            "a 'done' message's 'attempt' is a number (1.5), not an integer");
  EXPECT_EQ(what_of(R"({"type":"done","attempt":4294967296})"),
            "a 'done' message's 'attempt' is a number (4294967296), not an integer in range");
  EXPECT_EQ(what_of(R"({"type":"done","attempt":null})"), "a 'done' message's 'attempt' is null, not an integer");
  EXPECT_EQ(what_of(R"({"type":"refuse","message":"m","hint":[]})"),
            "a 'refuse' message's 'hint' is an array, not a string");
  EXPECT_EQ(what_of(R"({"type":"stop","attempt":0,"restart":false,"reason":"bored"})"),
            "a 'stop' message's 'reason' is 'bored', not failure, lost, signal or admit");
  EXPECT_EQ(what_of(R"({"type":"stop","attempt":0,"restart":1,"reason":"lost"})"),
            "a 'stop' message's 'restart' is a number (1), not a boolean");
  // nested fields are named by their path
  json stop = msg::encode(msg::Stop{1, false, a_cause()});
  stop["cause"]["stderr_tail"][1] = 5;
  EXPECT_EQ(what_of(stop.dump()), "a 'stop' message's 'cause.stderr_tail[1]' is a number (5), not a string");
  stop["cause"].erase("rank");
  EXPECT_EQ(what_of(stop.dump()), "a 'stop' message without 'cause.rank'");
  json ranks = msg::encode(msg::Ranks{0, 1, "b", {a_rank()}});
  ranks["ranks"][0]["kernel"]["state"] = "TT";
  EXPECT_EQ(what_of(ranks.dump()),
            R"(a 'ranks' message's 'ranks[0].kernel.state' is a string ("TT"), not one character)");
  ranks["ranks"][0] = 3;
  EXPECT_EQ(what_of(ranks.dump()), "a 'ranks' message's 'ranks[0]' is a number (3), not an object");
  // the typed exception is a trainbox::Error, with a fix
  try {
    msg::decode_line("{}");
    FAIL();
  } catch (const trainbox::Error& e) {
    EXPECT_NE(e.hint().find("same trainbox version"), std::string::npos);
  }
}

// docs/distributed.md's table: route, type and top-level fields of every kind, as the code has them.
TEST(Messages, TheDocsProtocolTableIsTheCodes) {
  std::ifstream in(std::string(TRAINBOX_SOURCE_DIR) + "/docs/distributed.md");
  ASSERT_TRUE(in) << "docs/distributed.md";
  std::string line;
  bool in_section = false;
  struct Row {
    std::string route, type;
    std::vector<std::string> fields;
  };
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    if (line.rfind(fmt::format("### The control channel protocol (version {})", kRdzvProtocolVersion), 0) == 0)
      in_section = true;
    else if (in_section && line.rfind("#", 0) == 0)
      break;
    if (!in_section || line.rfind("| ", 0) != 0 || line.rfind("| from", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string c; std::getline(ss, c, '|');) cells.push_back(c);
    ASSERT_GE(cells.size(), 3u) << line;
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    Row r{trim(cells[0]), trim(cells[1]), {}};
    ASSERT_TRUE(r.type.size() > 2 && r.type.front() == '`' && r.type.back() == '`') << line;
    r.type = r.type.substr(1, r.type.size() - 2);
    // fields: `name`s outside (…), {…} and […]
    std::string top;
    int depth = 0;
    for (char c : cells[2]) {
      if (c == '(' || c == '{' || c == '[') ++depth;
      if (depth == 0) top += c;
      if ((c == ')' || c == '}' || c == ']') && depth > 0) --depth;
    }
    static const std::regex name("`([a-z_]+)`");
    for (std::sregex_iterator it(top.begin(), top.end(), name), end; it != end; ++it) r.fields.push_back((*it)[1]);
    rows.push_back(std::move(r));
  }
  ASSERT_EQ(rows.size(), msg::kProtocol.size()) << "one row per kind";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& spec = msg::kProtocol[i];
    EXPECT_EQ(rows[i].type, spec.type) << "row " << i + 1 << ": the table lists the kinds in messages.h's order";
    EXPECT_EQ(rows[i].route, msg::route_text(spec.route)) << spec.type;
    EXPECT_EQ(rows[i].fields, std::vector<std::string>(spec.fields.begin(), spec.fields.end())) << spec.type;
  }
}

// The server's N assignments share one encoding of the node list (issue 26): every line must be
// encode_line's, byte for byte, also when host names try to look like the spliced keys.
TEST(Messages, AssignLinesForManyNodesAreEncodeLinesBytes) {
  msg::Assign a;
  a.attempt = 2;
  a.assignment.nnodes = 4;
  a.assignment.world_size = 7;
  a.assignment.master_addr = "10.0.0.1";
  a.assignment.master_port = 29500;
  const std::vector<std::string> hosts = {"a", R"(b","node_rank":-1234567891,")", R"(c"rank_offset":-1234567892)",
                                          "d\n"};
  std::vector<msg::AssignedPlace> places;
  for (int i = 0, offset = 0; i < 4; offset += 1 + i % 2, ++i) {
    a.assignment.nodes.push_back({i, hosts[static_cast<std::size_t>(i)], "10.0.0." + std::to_string(i + 1), 1 + i % 2});
    places.push_back({i, offset});
  }
  const std::vector<std::string> lines = msg::encode_assign_lines(a, places);
  ASSERT_EQ(lines.size(), places.size());
  for (std::size_t i = 0; i < places.size(); ++i) {
    msg::Assign one = a;
    one.assignment.node_rank = places[i].node_rank;
    one.assignment.rank_offset = places[i].rank_offset;
    EXPECT_EQ(lines[i], msg::encode_line(one)) << "node " << i;
    EXPECT_EQ(msg::decode_line(lines[i]), msg::Message(one));
  }
}
