#include <trainbox/env/nccl_log.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>

namespace trainbox::env {

namespace {

// No std::regex here: libstdc++'s is recursive and a long line would overflow the stack
// (a parser fed by the outside world and fuzzed must not). Plain finds only.
constexpr std::size_t kMaxLine = 8192;  // of a message; NCCL's own are < 2 KiB (net_ib.cc's buffer)

bool has(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

std::string_view after(std::string_view s, std::string_view what) {
  auto p = s.find(what);
  return p == std::string_view::npos ? std::string_view{} : s.substr(p + what.size());
}

// "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:…" → {"mlx5_0:1/IB", "mlx5_1:1/RoCE"}; for
// sockets "[0]eth0:10.0.0.1<0>" → {"eth0:10.0.0.1"} (the "<port>" dropped).
std::vector<std::string> bracket_items(std::string_view s) {
  std::vector<std::string> out;
  s = s.substr(0, s.find(';'));  // the OOB interface follows
  std::size_t i = 0;
  while (i < s.size() && out.size() < 64) {
    auto open = s.find('[', i);
    if (open == std::string_view::npos) break;
    auto close = s.find(']', open);
    if (close == std::string_view::npos) break;
    std::string_view idx = s.substr(open + 1, close - open - 1);
    const bool numeric = !idx.empty() && idx.find_first_not_of("0123456789") == std::string_view::npos;
    std::size_t end = s.find_first_of(" \t[", close + 1);
    if (end == std::string_view::npos) end = s.size();
    std::string item(s.substr(close + 1, end - close - 1));
    if (auto lt = item.find('<'); lt != std::string::npos) item.erase(lt);
    if (numeric && !item.empty()) out.push_back(item);
    i = end;
  }
  return out;
}

}  // namespace

void add_nccl_line(NcclTransport& t, std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  std::string_view msg;
  bool warn = false;
  if (auto p = line.find("NCCL INFO "); p != std::string_view::npos) {
    msg = line.substr(p + 10);
  } else if (auto q = line.find("NCCL WARN "); q != std::string_view::npos) {
    msg = line.substr(q + 10);
    warn = true;
  } else if (auto v = line.find("NCCL version "); v != std::string_view::npos) {
    msg = line.substr(v);  // printed bare by NCCL's init on rank 0 of each communicator
  } else {
    return;  // not NCCL's
  }
  if (msg.size() > kMaxLine) msg = msg.substr(0, kMaxLine);
  ++t.nccl_lines;
  if (warn) {
    if (t.warnings.size() < 8) t.warnings.emplace_back(trim(msg));
    return;
  }
  if (starts_with(msg, "NCCL version ")) {
    std::string_view v = msg.substr(13);
    t.version = std::string(v.substr(0, v.find(' ')));
  } else if (starts_with(msg, "NET/IB : Using")) {
    t.ib_devices = bracket_items(after(msg, "Using"));
  } else if (starts_with(msg, "NET/IB : No device found")) {
    t.ib_no_device = true;
  } else if (starts_with(msg, "NET/Socket : Using")) {
    t.socket_devices = bracket_items(after(msg, "Using"));
  } else if (starts_with(msg, "Using network ")) {
    t.network = trim(msg.substr(14));
  } else if (starts_with(msg, "NCCL_IB_DISABLE set by environment to ")) {
    std::string v = trim(msg.substr(38));
    while (!v.empty() && v.back() == '.') v.pop_back();
    t.ib_disabled_by_env = !v.empty() && v != "0";
  } else if (has(msg, "GPU Direct RDMA Disabled for HCA")) {
    std::string_view rest = after(msg, "for HCA");
    auto a = rest.find('\''), b = a == std::string_view::npos ? a : rest.find('\'', a + 1);
    std::string hca =
        b == std::string_view::npos ? std::string(trim(rest)) : std::string(rest.substr(a + 1, b - a - 1));
    if (t.gdr_disabled.size() < 64) t.gdr_disabled.push_back(hca);
  } else if (starts_with(msg, "Channel ") && has(msg, " via ")) {
    std::string_view via = after(msg, " via ");
    if (starts_with(via, "NET/")) {
      // "NET/IB/0/GDRDMA", "NET/IB/0(8)/GDRDMA(PCI)/Shared", "NET/Socket/1", "NET/AWS Libfabric/0"
      std::string_view rest = via.substr(4);
      // The name runs to the "/<dev number>" that follows it (plugin names may hold spaces and '/').
      std::size_t cut = std::string_view::npos;
      for (std::size_t i = 0; i + 1 < rest.size(); ++i)
        if (rest[i] == '/' && rest[i + 1] >= '0' && rest[i + 1] <= '9') {
          cut = i;
          break;
        }
      std::string name(cut == std::string_view::npos ? trim(rest) : trim(rest.substr(0, cut)));
      if (!name.empty()) {
        if (t.net_name.empty()) t.net_name = name;
        ++t.net_channels;
        if (has(rest, "/GDRDMA")) ++t.gdr_channels;
      } else {
        ++t.unrecognised;
      }
    } else if (starts_with(via, "P2P/")) {
      ++t.p2p_channels;
    } else if (starts_with(via, "SHM/")) {
      ++t.shm_channels;
    } else {
      ++t.unrecognised;  // CollNet, NVLS, a transport newer than this parser
    }
  } else {
    ++t.unrecognised;
  }
}

NcclTransport parse_nccl_log(std::string_view text) {
  NcclTransport t;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    add_nccl_line(t, text.substr(start, end - start));
    start = end + 1;
  }
  return t;
}

std::string transport_kind(const NcclTransport& t) {
  if (t.net_channels > 0) return "NET/" + t.net_name;
  if (t.p2p_channels > 0 || t.shm_channels > 0) return "P2P/SHM";
  return {};
}

int transport_gdr(const NcclTransport& t) {
  if (t.net_channels == 0) return -1;
  return t.gdr_channels > 0 ? 1 : 0;
}

std::string transport_summary(const NcclTransport& t) {
  const std::string kind = transport_kind(t);
  if (kind.empty()) {
    if (t.nccl_lines == 0) return "unknown: NCCL wrote no INFO lines (was NCCL used at all?)";
    return fmt::format("unknown: {} NCCL lines but no channel connections{}", t.nccl_lines,
                       t.network.empty() ? std::string() : " (network " + t.network + ")");
  }
  if (kind == "P2P/SHM") {
    std::vector<std::string> parts;
    if (t.p2p_channels) parts.push_back(fmt::format("{} P2P", t.p2p_channels));
    if (t.shm_channels) parts.push_back(fmt::format("{} SHM", t.shm_channels));
    return fmt::format("P2P/SHM ({} channel connections; within one node NCCL needs no network)",
                       fmt::join(parts, ", "));
  }
  const auto& devs = t.net_name == "IB"       ? t.ib_devices
                     : t.net_name == "Socket" ? t.socket_devices
                                              : std::vector<std::string>{};
  std::string gdr = t.gdr_channels == t.net_channels ? " with GPUDirect RDMA"
                    : t.gdr_channels > 0
                        ? fmt::format(" with GPUDirect RDMA on {} of {} channels", t.gdr_channels, t.net_channels)
                        : (t.net_name == "Socket" ? "" : " without GPUDirect RDMA");
  return fmt::format("{}{}{}", kind, gdr, devs.empty() ? std::string() : fmt::format(" ({})", fmt::join(devs, ", ")));
}

// --- capture ---
NcclLogCapture::NcclLogCapture() {
  auto save = [&](const char* name) {
    Saved s;
    s.name = name;
    if (const char* v = std::getenv(name)) {
      s.set = true;
      s.value = v;
    }
    saved_.push_back(s);
  };
  if (const char* f = std::getenv("NCCL_DEBUG_FILE"); f && *f) {
    // The user's file: NCCL expands %h (host) and %p (pid) in it.
    std::string p = f;
    const std::string host = host_name();
    for (auto pos = p.find("%h"); pos != std::string::npos; pos = p.find("%h")) p.replace(pos, 2, host);
    for (auto pos = p.find("%p"); pos != std::string::npos; pos = p.find("%p"))
      p.replace(pos, 2, std::to_string(getpid()));
    path_ = p;
    return;
  }
  save("NCCL_DEBUG");
  save("NCCL_DEBUG_SUBSYS");
  save("NCCL_DEBUG_FILE");
  const char* tmp = std::getenv("TMPDIR");
  path_ = fmt::format("{}/trainbox-nccl-{}.log", tmp && *tmp ? tmp : "/tmp", getpid());
  owned_ = true;
  const char* debug = std::getenv("NCCL_DEBUG");
  if (!debug || (std::string(debug) != "INFO" && std::string(debug) != "TRACE")) setenv("NCCL_DEBUG", "INFO", 1);
  const char* subsys = std::getenv("NCCL_DEBUG_SUBSYS");
  if (subsys && *subsys && std::string(subsys) != "ALL" && subsys[0] != '^')
    setenv("NCCL_DEBUG_SUBSYS", (std::string(subsys) + ",INIT,NET").c_str(), 1);
  else if (!subsys || !*subsys || subsys[0] == '^')
    setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
  setenv("NCCL_DEBUG_FILE", path_.c_str(), 1);
}

NcclLogCapture::~NcclLogCapture() {
  for (const auto& s : saved_) {
    if (s.set)
      setenv(s.name.c_str(), s.value.c_str(), 1);
    else
      unsetenv(s.name.c_str());
  }
  if (owned_) std::remove(path_.c_str());
}

std::string NcclLogCapture::text() const {
  auto t = read_file(path_);
  return t ? *t : std::string{};
}

}  // namespace trainbox::env
