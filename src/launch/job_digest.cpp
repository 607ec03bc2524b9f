// The job digest: what a c10d job's nodes must agree on about the worker command (refused when
// it differs) and what each node may set its own way (reported). The rule: launch/job_digest.h.
#include <trainbox/launch/job_digest.h>

#include <cstdint>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/launch/run_config.h>
#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// A command line is bytes, not always UTF-8 (a path in another encoding): bytes that are not
// UTF-8 become U+FFFD, the same on every node, so the digest is valid JSON and still compares.
std::string dump_digest(const json& d) { return d.dump(-1, ' ', false, json::error_handler_t::replace); }

// FNV-1a, 64 bits: a digest to compare, not a secret (the join travels in the clear anyway).
std::string fnv1a(std::string_view data) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : data) h = (h ^ ch) * 1099511628211ULL;
  return fmt::format("{:016x}", h);
}

// The contents of a small regular file (a config, a script), hashed; nullopt for anything else.
// 1 MiB: configs and scripts are smaller, and a data file is not read at start-up.
std::optional<std::string> file_hash(const std::string& path) {
  std::error_code ec;
  if (path.empty() || path.front() == '-' || !fs::is_regular_file(path, ec) || fs::file_size(path, ec) > (1u << 20))
    return std::nullopt;
  auto text = read_file(path);
  return text ? std::optional(fnv1a(*text)) : std::nullopt;
}

json pairs(const std::vector<std::pair<std::string, std::string>>& kv) {
  json out = json::array();
  for (const auto& [k, v] : kv) out.push_back({k, v});
  return out;
}

// --- the program: what runs, by name (its path differs between machines) ---
struct Program {
  std::string name;                 // "trainbox train", "python", "python -m pkg.train", "bash"
  std::optional<std::string> path;  // a Python script as given
  std::string contents;             // its hash, or the -c code's
};

Program program_of(const std::vector<std::string>& command) {
  Program p;
  p.name = command.empty() ? "" : fs::path(command.front()).filename().string();
  if (p.name == "trainbox-torch") p.name = "trainbox";  // the same program, reached through the launcher
  if (p.name == "trainbox" && command.size() > 1 && !starts_with(command[1], "-")) p.name += " " + command[1];
  if (!is_python_command(command)) return p;
  p.name = "python";  // python3 here, python3.11 there: the interpreter's version is the environment's
  for (std::size_t i = 1; i < command.size(); ++i) {
    const std::string& a = command[i];
    if ((a == "-m" || a == "-c") && i + 1 < command.size()) {
      if (a == "-m") p.name += " -m " + command[i + 1];
      if (a == "-c") {  // the code itself is the script
        p.contents = fnv1a(command[i + 1]);
        p.path = "-c";
      }
      return p;
    }
    if (a == "-X" || a == "-W") {  // the interpreter's options that take a value
      ++i;
      continue;
    }
    if (starts_with(a, "-")) continue;
    p.path = a;
    p.contents = file_hash(a).value_or("unreadable");
    return p;
  }
  return p;
}

// --- comparing ---
const json* member(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::vector<std::pair<std::string, std::string>> pairs_of(const json* j) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!j || !j->is_array()) return out;
  for (const auto& e : *j)
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
      out.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
  return out;
}

std::string value_in(const std::vector<std::pair<std::string, std::string>>& kv, const std::string& key) {
  for (const auto& [k, v] : kv)
    if (k == key) return v;
  return "(not set)";
}

// Keys in `theirs`' order, then those only `ours` has, whose values differ.
std::vector<std::string> differing_keys(const std::vector<std::pair<std::string, std::string>>& theirs,
                                        const std::vector<std::pair<std::string, std::string>>& ours) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : theirs)
    if (value_in(ours, k) != v) keys.push_back(k);
  for (const auto& [k, v] : ours)
    if (value_in(theirs, k) == "(not set)") keys.push_back(k);
  return keys;
}

std::vector<std::string> strings_of(const json* j) {
  std::vector<std::string> out;
  if (j && j->is_array())
    for (const auto& e : *j)
      if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

// The arguments that differ, with the option they belong to: "--run-dir runs/job-b" against
// "--run-dir runs/job-a". What is common before and after is left out.
DigestItemDiff args_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::size_t p = 0, s = 0;
  while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
  while (s + p < a.size() && s + p < b.size() && a[a.size() - 1 - s] == b[b.size() - 1 - s]) ++s;
  DigestItemDiff d;
  d.what = "the worker command's arguments";
  std::size_t from = p;
  // The value of a long option (--run-dir DIR): name the option. A short one may be a flag (python -u).
  if (p > 0 && starts_with(a[p - 1], "--") && a[p - 1].find('=') == std::string::npos) {
    from = p - 1;
    d.what = a[from];
  } else if (p < a.size() && p < b.size() && starts_with(a[p], "-") && a[p].find('=') != std::string::npos &&
             a[p].substr(0, a[p].find('=')) == b[p].substr(0, b[p].find('='))) {
    d.what = a[p].substr(0, a[p].find('='));  // --run-dir=runs/job-b
  }
  auto words = [&](const std::vector<std::string>& v) {
    std::string out;
    for (std::size_t i = from; i + s < v.size(); ++i) out += (out.empty() ? "" : " ") + v[i];
    if (out.size() > 160) out = out.substr(0, 157) + "...";
    return out.empty() ? std::string("nothing") : out;
  };
  d.theirs = words(a);
  d.ours = words(b);
  return d;
}

const char* const kKeysFix =
    "start every node with the same model, data, train, optim and schedule settings; paths and per-machine keys "
    "may differ (docs/distributed.md, \"What the nodes must agree on\")";

std::optional<DigestItemDiff> refusal(const json& t, const json& o) {
  const std::string tp = t.value("program", ""), op = o.value("program", "");
  if (tp != op)
    return DigestItemDiff{"the worker program", tp, op, "run the same program on every node (its path may differ)"};
  if (t.value("script", "") != o.value("script", ""))
    return DigestItemDiff{
        "the worker script",
        fmt::format("{} (contents {})", t.value("script_path", "?"), t.value("script", "").substr(0, 8)),
        fmt::format("{} (contents {})", o.value("script_path", "?"), o.value("script", "").substr(0, 8)),
        "put the same version of the script on every node (its path may differ)"};
  const json *tk = member(t, "keys"), *ok = member(o, "keys");
  if (tk && ok) {  // a node whose config does not resolve has none: its worker says why
    const auto theirs = pairs_of(tk), ours = pairs_of(ok);
    const auto keys = differing_keys(theirs, ours);
    if (!keys.empty()) {
      const std::string& k = keys.front();
      return DigestItemDiff{k, k + " = " + value_in(theirs, k), k + " = " + value_in(ours, k), kKeysFix};
    }
  }
  return std::nullopt;
}
}  // namespace

std::string job_digest(const std::vector<std::string>& command, const WorkerKeysReader& keys) {
  const Program p = program_of(command);
  json d;
  d["program"] = p.name;
  if (p.path) {
    d["script"] = p.contents;
    d["script_path"] = *p.path;
  }
  d["args"] = command.empty() ? json::array() : json(std::vector<std::string>(command.begin() + 1, command.end()));
  std::optional<WorkerKeys> k = keys ? keys(command) : std::nullopt;
  if (k) {
    d["keys"] = pairs(k->shared);
    d["node_keys"] = pairs(k->per_node);
    return dump_digest(d);  // the config files it names are in its keys
  }
  json files = json::array();
  for (std::size_t i = 1; i < command.size(); ++i)
    if (command[i] != p.path)
      if (auto h = file_hash(command[i])) files.push_back({command[i], *h});
  d["files"] = files;
  return dump_digest(d);
}

JobDigestComparison compare_job_digests(const std::string& theirs, const std::string& ours) {
  JobDigestComparison c;
  if (theirs == ours) return c;
  const json t = json::parse(theirs, nullptr, false), o = json::parse(ours, nullptr, false);
  if (!t.is_object() || !o.is_object()) {  // not a digest this version writes (versions are compared first)
    c.refused = DigestItemDiff{"the worker command", "another digest", "this one", "start every node the same way"};
    return c;
  }
  c.refused = refusal(t, o);
  if (c.refused) return c;
  // --- what may differ: reported ---
  const auto targs = strings_of(member(t, "args")), oargs = strings_of(member(o, "args"));
  if (targs != oargs) {
    c.noted.push_back(args_difference(targs, oargs));
    const std::string& what = c.noted.back().what;
    if (o.value("program", "") == "trainbox train" && (starts_with(what, "--run-dir") || starts_with(what, "--resume")))
      c.noted.back().fix =
          "every rank resumes a restart from its own run dir, and only rank 0's holds the checkpoints: for restarts, "
          "put the run dir where every node sees rank 0's (a shared file system)";
  }
  const json *tn = member(t, "node_keys"), *on = member(o, "node_keys");
  if (tn && on) {
    const auto tv = pairs_of(tn), ov = pairs_of(on);
    for (const auto& k : differing_keys(tv, ov))
      c.noted.push_back({k, k + " = " + value_in(tv, k), k + " = " + value_in(ov, k), ""});
  }
  const auto tf = pairs_of(member(t, "files")), of = pairs_of(member(o, "files"));
  for (const auto& [path, hash] : tf) {
    const std::string mine = value_in(of, path);
    if (mine != "(not set)" && mine != hash)
      c.noted.push_back(
          {"the contents of " + path, "contents " + hash.substr(0, 8), "contents " + mine.substr(0, 8), ""});
  }
  return c;
}

}  // namespace trainbox::launch
