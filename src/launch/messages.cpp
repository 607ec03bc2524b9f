// The control channel's messages (launch/messages.h): one field list per kind drives both
// encode and decode, so what is written is what is read.
#include <trainbox/launch/messages.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace trainbox::launch {

std::string LostNode::describe() const {
  return fmt::format("lost node {} ({}, {}, last heard {:.1f} s ago)", node_rank, host, addr, last_heard_s);
}

namespace msg {

using nlohmann::json;

namespace {

// --- the field lists: f(name, member) for every field on the wire, in kFields order ---
// One table for the encoder (M const) and the decoder; nested objects have their own rows.
template <class T, class... Ts>
constexpr bool kOneOf = (std::is_same_v<T, Ts> || ...);
template <class T>
concept HasFields = kOneOf<T, Join, Joined, Refuse, Abort, Assign, NodeInfo, Failed, RootCause, Interrupted, Done,
                           Stopped, LostNode, SignalElsewhere, Start, End, KernelView, RankProgress, Ranks, Heartbeat>;

template <class M, class F>
requires HasFields<std::remove_const_t<M>>
void fields(M& m, F&& f) {
  using T = std::remove_const_t<M>;
  if constexpr (std::is_same_v<T, Join>) {
    f("version", m.version), f("run_id", m.run_id), f("nnodes", m.nnodes), f("nnodes_max", m.nnodes_max);
    f("max_restarts", m.max_restarts), f("nproc", m.nproc), f("host", m.host), f("addr", m.addr);
    f("addr_given", m.addr_given), f("hosting", m.hosting), f("free_port", m.free_port), f("pid", m.pid);
    f("trainbox_version", m.trainbox_version), f("config", m.config);
  } else if constexpr (std::is_same_v<T, Joined>) {
    f("count", m.count), f("nnodes", m.nnodes), f("waiting", m.waiting), f("note", m.note);
  } else if constexpr (kOneOf<T, Refuse, Abort>) {
    f("message", m.message), f("hint", m.hint);
  } else if constexpr (std::is_same_v<T, Assign>) {
    f("node_rank", m.assignment.node_rank), f("nnodes", m.assignment.nnodes);
    f("world_size", m.assignment.world_size), f("rank_offset", m.assignment.rank_offset);
    f("master_addr", m.assignment.master_addr), f("master_port", m.assignment.master_port);
    f("attempt", m.attempt), f("nodes", m.assignment.nodes);
  } else if constexpr (std::is_same_v<T, NodeInfo>) {
    f("node_rank", m.node_rank), f("host", m.host), f("addr", m.addr), f("nproc", m.nproc);
  } else if constexpr (std::is_same_v<T, Failed>) {
    f("attempt", m.attempt), f("cause", m.cause);
  } else if constexpr (std::is_same_v<T, RootCause>) {
    f("host", m.host), f("node_rank", m.node_rank), f("rank", m.rank), f("local_rank", m.local_rank), f("pid", m.pid);
    f("exit_code", m.exit_code), f("signal", m.signal), f("time", m.time), f("stderr_tail", m.stderr_tail);
    f("error_file", m.error_file), f("error_message", m.error_message), f("traceback", m.traceback);
  } else if constexpr (std::is_same_v<T, Interrupted>) {
    f("attempt", m.attempt), f("signal", m.signal);
  } else if constexpr (std::is_same_v<T, Stopped>) {
    f("attempt", m.attempt), f("free_port", m.free_port);  // node 0's, for the next MASTER_PORT
  } else if constexpr (std::is_same_v<T, Done>) {
    f("attempt", m.attempt);
  } else if constexpr (std::is_same_v<T, LostNode>) {
    f("node_rank", m.node_rank), f("host", m.host), f("addr", m.addr), f("last_heard_s", m.last_heard_s);
    f("why", m.why);
  } else if constexpr (std::is_same_v<T, SignalElsewhere>) {
    f("signal", m.signal), f("node_rank", m.node_rank), f("host", m.host);
  } else if constexpr (std::is_same_v<T, Start>) {
    f("attempt", m.attempt), f("master_port", m.master_port);
  } else if constexpr (std::is_same_v<T, End>) {
    f("exit_code", m.exit_code);
  } else if constexpr (std::is_same_v<T, KernelView>) {
    f("known", m.known), f("state", m.state), f("frozen", m.frozen), f("wchan", m.wchan), f("d_wchan", m.d_wchan);
    f("d_tid", m.d_tid), f("stopped_s", m.stopped_s), f("d_s", m.d_s), f("window_s", m.window_s), f("cpu_s", m.cpu_s);
  } else if constexpr (std::is_same_v<T, RankProgress>) {
    f("rank", m.who.rank), f("local_rank", m.who.local_rank), f("pid", m.who.pid), f("reporting", m.reporting);
    f("finished", m.finished), f("step", m.step), f("phase", m.phase), f("idle_s", m.idle_s);
    f("reporting_s", m.reporting_s), f("kernel", m.kernel);
  } else if constexpr (std::is_same_v<T, Ranks>) {
    f("attempt", m.attempt), f("node_rank", m.node_rank), f("host", m.host), f("ranks", m.ranks);
  }  // Heartbeat: no fields
}
// stop's reason is which of its alternatives it holds; only that one's fields travel.
constexpr std::array<const char*, 4> kStopReasons = {"failure", "lost", "signal", "admit"};

// --- encode ---
template <class T>
json value_of(const T& v) {
  if constexpr (std::is_same_v<T, char>) {
    return std::string(1, v);
  } else if constexpr (HasFields<T>) {
    json j = json::object();
    fields(v, [&](const char* key, const auto& member) { j[key] = value_of(member); });
    return j;
  } else if constexpr (requires(const T& x) { x.begin(); } && !std::is_same_v<T, std::string>) {
    json a = json::array();
    for (const auto& e : v) a.push_back(value_of(e));
    return a;
  } else {
    return v;
  }
}

json encode_stop(const Stop& s) {
  json j = {{"attempt", s.attempt}, {"restart", s.restart}, {"reason", kStopReasons[s.why.index()]}};
  if (const auto* c = std::get_if<RootCause>(&s.why)) j["cause"] = value_of(*c);
  if (const auto* l = std::get_if<LostNode>(&s.why)) j["lost"] = value_of(*l);
  if (const auto* g = std::get_if<SignalElsewhere>(&s.why))
    fields(*g, [&](const char* key, const auto& member) { j[key] = member; });
  if (const auto* a = std::get_if<Admitting>(&s.why)) j["admit"] = a->hosts;
  return j;
}

// --- decode ---
// Reads one object's fields. Errors name the message and the field's path in it:
// "a 'stop' message's 'cause.rank' is a string (\"x\"), not an integer".
class Reader {
 public:
  // `message`: "a 'stop' message"; `path`: where `j` is in it ("" at the top, "cause", "ranks[2].kernel").
  Reader(const json& j, std::string message, std::string path = {})
      : j_(j), message_(std::move(message)), path_(std::move(path)) {
    if (!j_.is_object()) wrong(j_, path_, "an object");
  }
  template <class T>
  void operator()(const char* key, T& out) const {
    const std::string where = path_.empty() ? std::string(key) : path_ + "." + key;
    auto it = j_.find(key);
    if (it == j_.end()) throw ProtocolError(fmt::format("{} without '{}'", message_, where));
    read(*it, out, where);
  }

 private:
  [[noreturn]] void wrong(const json& v, const std::string& where, const char* expected) const {
    std::string what =
        v.is_null() ? "null" : fmt::format("{} {}", v.is_object() || v.is_array() ? "an" : "a", v.type_name());
    if (v.is_primitive() && !v.is_null())
      what += fmt::format(" ({})", v.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 40));
    throw ProtocolError(fmt::format("{}'s '{}' is {}, not {}", message_, where, what, expected));
  }
  template <class T>
  void read(const json& v, T& out, const std::string& where) const {
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) wrong(v, where, "a boolean");
      out = v.get<bool>();
    } else if constexpr (std::is_same_v<T, char>) {
      if (!v.is_string() || v.get_ref<const std::string&>().size() != 1) wrong(v, where, "one character");
      out = v.get_ref<const std::string&>()[0];
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) wrong(v, where, "an integer");
      const bool fits = v.is_number_unsigned()
                            ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                            : v.get<std::int64_t>() >= std::numeric_limits<T>::min() &&
                                  v.get<std::int64_t>() <= std::numeric_limits<T>::max();
      if (!fits) wrong(v, where, "an integer in range");
      out = v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>()) : static_cast<T>(v.get<std::int64_t>());
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) wrong(v, where, "a number");
      out = v.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) wrong(v, where, "a string");
      out = v.get<std::string>();
    } else if constexpr (HasFields<T>) {
      fields(out, Reader(v, message_, where));
    } else {  // a vector
      if (!v.is_array()) wrong(v, where, "an array");
      out.clear();
      for (std::size_t i = 0; i < v.size(); ++i) read(v[i], out.emplace_back(), fmt::format("{}[{}]", where, i));
    }
  }
  const json& j_;
  std::string message_, path_;
};

Stop decode_stop(const json& j) {
  const Reader r(j, "a 'stop' message");
  Stop s;
  std::string reason;
  r("attempt", s.attempt);
  r("restart", s.restart);
  r("reason", reason);
  if (reason == kStopReasons[0]) {
    r("cause", s.why.emplace<RootCause>());
  } else if (reason == kStopReasons[1]) {
    r("lost", s.why.emplace<LostNode>());
  } else if (reason == kStopReasons[2]) {
    fields(s.why.emplace<SignalElsewhere>(), r);
  } else if (reason == kStopReasons[3]) {
    r("admit", s.why.emplace<Admitting>().hosts);
  } else {
    throw ProtocolError(fmt::format("a 'stop' message's 'reason' is '{}', not failure, lost, signal or admit", reason));
  }
  return s;
}

// The kind named `type`, decoded; false when no kind has that name.
template <std::size_t I = 0>
bool decode_kind(const std::string& type, const json& j, Message& out) {
  if constexpr (I == std::variant_size_v<Message>) {
    return false;
  } else {
    using Kind = std::variant_alternative_t<I, Message>;
    if (type != Kind::kType) return decode_kind<I + 1>(type, j, out);
    if constexpr (std::is_same_v<Kind, Stop>) {
      out = decode_stop(j);
    } else {
      Kind k;
      fields(k, Reader(j, fmt::format("a '{}' message", type)));
      out = std::move(k);
    }
    return true;
  }
}

}  // namespace

std::string_view route_text(Route r) {
  // In Route's order; the docs table's first column.
  static constexpr std::array<std::string_view, 5> kTexts = {"launcher → server", "server → launcher",
                                                             "server → launchers", "both ways",
                                                             "launcher → server → the other launchers"};
  return kTexts.at(static_cast<std::size_t>(r));
}

std::string_view trainbox_version_text() {
#ifdef TRAINBOX_VERSION
  return TRAINBOX_VERSION;
#else
  return "unknown";
#endif
}

std::string_view type_of(const Message& m) {
  return std::visit([](const auto& k) { return std::decay_t<decltype(k)>::kType; }, m);
}

json encode(const Message& m) {
  json j = std::visit(
      [](const auto& k) -> json {
        if constexpr (std::is_same_v<std::decay_t<decltype(k)>, Stop>)
          return encode_stop(k);
        else
          return value_of(k);
      },
      m);
  j["type"] = std::string(type_of(m));
  return j;
}

Message decode(const json& j) {
  if (!j.is_object()) throw ProtocolError(fmt::format("a message that is a JSON {}, not an object", j.type_name()));
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) throw ProtocolError("a message without a 'type'");
  const std::string& type = it->get_ref<const std::string&>();
  Message m;
  if (!decode_kind(type, j, m)) throw ProtocolError(fmt::format("a message of unknown type '{}'", type));
  return m;
}

std::string encode_line(const Message& m) { return encode(m).dump(-1, ' ', false, json::error_handler_t::replace); }

std::vector<std::string> encode_assign_lines(const Assign& a, std::span<const AssignedPlace> places) {
  // Marks no rank or offset takes, spliced out. The keys come sorted (std::map): "node_rank"
  // before "nodes", "rank_offset" after; a host name cannot fake either key, as its quotes
  // are escaped, and nothing after "rank_offset" is a string at all.
  constexpr int kRankMark = -1'234'567'891, kOffsetMark = -1'234'567'892;
  Assign marked = a;
  marked.assignment.node_rank = kRankMark;
  marked.assignment.rank_offset = kOffsetMark;
  const std::string line = encode_line(marked);
  const std::string rank_key = "\"node_rank\":", offset_key = "\"rank_offset\":";
  const std::size_t r = line.find(rank_key + std::to_string(kRankMark));
  const std::size_t o = line.rfind(offset_key + std::to_string(kOffsetMark));
  if (r == std::string::npos || o == std::string::npos || o < r)
    throw std::logic_error("encode_assign_lines: the assign encoding changed its key order");
  const std::string_view all(line);
  const std::string_view head = all.substr(0, r + rank_key.size());
  const std::size_t mid_at = r + rank_key.size() + std::to_string(kRankMark).size();
  const std::string_view middle = all.substr(mid_at, o + offset_key.size() - mid_at);
  const std::string_view tail = all.substr(o + offset_key.size() + std::to_string(kOffsetMark).size());
  std::vector<std::string> out;
  out.reserve(places.size());
  for (const AssignedPlace& p : places)
    out.push_back(fmt::format("{}{}{}{}{}", head, p.node_rank, middle, p.rank_offset, tail));
  return out;
}

Message decode_line(std::string_view line) {
  json j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) throw ProtocolError("a line that is not JSON");
  return decode(j);
}

}  // namespace msg
}  // namespace trainbox::launch
