#include <trainbox/env/fabric.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox::env {
namespace fs = std::filesystem;

namespace {

// Directory entries by name, sorted; a missing or unreadable directory is an empty list and,
// when `why` is given, the reason.
std::vector<std::string> list_dir(const std::string& dir, std::string* why = nullptr) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) out.push_back(it->path().filename().string());
  if (ec && why) *why = ec.message();
  std::sort(out.begin(), out.end());
  return out;
}

bool exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

std::string read_trimmed(const std::string& path) {
  auto t = read_file(path);
  return t ? trim(*t) : std::string{};
}

// "4: ACTIVE" → "ACTIVE"; "5: LinkUp" → "LinkUp"; text without the "N: " form is kept whole.
std::string after_colon(const std::string& s) {
  static const std::regex kState(R"(^\s*\d+\s*:\s*(\S.*)$)");
  std::smatch m;
  return std::regex_match(s, m, kState) ? trim(m[1].str()) : s;
}

// "0000:18:00.0" in either NVML's 8-digit ("00000000:18:00.0") or sysfs' 4-digit domain form.
std::string sysfs_bdf(std::string bdf) {
  std::transform(bdf.begin(), bdf.end(), bdf.begin(), [](unsigned char c) { return std::tolower(c); });
  auto colon = bdf.find(':');
  if (colon == 8 && bdf.compare(0, 4, "0000") == 0) bdf = bdf.substr(4);
  return bdf;
}

int numa_of(const std::string& pci_dir) {
  const std::string t = read_trimmed(pci_dir + "/numa_node");
  if (t.empty()) return -1;
  try {
    return std::stoi(t);
  } catch (const std::exception&) {
    return -1;
  }
}

// RLIMIT_MEMLOCK from /proc/self/limits' "Max locked memory  <soft>  <hard>  bytes" line.
bool parse_limits(const std::string& text, std::int64_t& soft, std::int64_t& hard) {
  static const std::regex kLine(R"(Max locked memory\s+(\S+)\s+(\S+))");
  std::smatch m;
  if (!std::regex_search(text, m, kLine)) return false;
  auto value = [](const std::string& v, std::int64_t& out) {
    if (v == "unlimited") {
      out = -1;
      return true;
    }
    if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    out = std::stoll(v);
    return true;
  };
  return value(m[1].str(), soft) && value(m[2].str(), hard);
}

void probe_port(const std::string& hca_dir, const std::string& hca, const std::string& port_name, HcaInfo& info,
                FabricInfo& f) {
  HcaPort p;
  try {
    p.port = std::stoi(port_name);
  } catch (const std::exception&) {
    f.notes.push_back(fmt::format("{}: port directory \"{}\" is not a number; skipped", hca, port_name));
    return;
  }
  const std::string dir = hca_dir + "/ports/" + port_name;
  auto state = read_file(dir + "/state");
  if (!state) {
    f.notes.push_back(fmt::format("{} port {}: {}/state cannot be read (the device vanished or sysfs is not readable)",
                                  hca, p.port, dir));
    p.state = "UNKNOWN";
  } else {
    p.state = after_colon(trim(*state));
    if (p.state.empty()) p.state = "UNKNOWN";
  }
  p.phys_state = after_colon(read_trimmed(dir + "/phys_state"));
  p.rate = read_trimmed(dir + "/rate");
  static const std::regex kRate(R"(^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec)");
  std::smatch m;
  if (std::regex_search(p.rate, m, kRate)) p.rate_gbps = std::stod(m[1].str());
  p.link_layer = read_trimmed(dir + "/link_layer");
  // The port's netdev: RoCE names it in the GID table; IPoIB and RoCE NICs list it under the
  // PCI device's net/ (one per port, told apart by dev_port = port - 1).
  p.netdev = read_trimmed(dir + "/gid_attrs/ndevs/0");
  if (p.netdev.empty()) {
    const auto nets = list_dir(hca_dir + "/device/net");
    for (const auto& n : nets) {
      const std::string dp = read_trimmed(hca_dir + "/device/net/" + n + "/dev_port");
      if ((nets.size() == 1 && (dp.empty() || dp == std::to_string(p.port - 1))) || dp == std::to_string(p.port - 1)) {
        p.netdev = n;
        break;
      }
    }
  }
  info.ports.push_back(std::move(p));
}

// --- HCAs ---
void probe_hcas(const std::string& root, FabricInfo& f) {
  const std::string ib = root + "/sys/class/infiniband";
  f.sysfs_present = exists(ib);
  std::string why;
  const auto names = list_dir(ib, &why);
  if (f.sysfs_present && !why.empty()) f.notes.push_back(fmt::format("{} cannot be listed: {}", ib, why));
  for (const auto& name : names) {
    const std::string dir = ib + "/" + name;
    HcaInfo h;
    h.name = name;
    h.firmware = read_trimmed(dir + "/fw_ver");
    std::error_code ec;
    const fs::path dev = fs::canonical(dir + "/device", ec);
    if (!ec) h.pci_address = dev.filename().string();
    std::string pwhy;
    auto ports = list_dir(dir + "/ports", &pwhy);
    if (ports.empty())
      f.notes.push_back(
          fmt::format("{}: no ports under {}/ports{}", name, dir, pwhy.empty() ? std::string() : " (" + pwhy + ")"));
    std::sort(ports.begin(), ports.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    for (const auto& p : ports) probe_port(dir, name, p, h, f);
    f.hcas.push_back(std::move(h));
  }
  std::sort(f.hcas.begin(), f.hcas.end(), [](const HcaInfo& a, const HcaInfo& b) {
    return a.name.size() != b.name.size() ? a.name.size() < b.name.size() : a.name < b.name;
  });
  f.netdevs = list_dir(root + "/sys/class/net");
}

// --- device nodes: present and openable (a container without --device=/dev/infiniband has none) ---
void probe_device_nodes(const std::string& root, FabricInfo& f) {
  const std::string devib = root + "/dev/infiniband";
  f.dev_infiniband = exists(devib);
  static const std::regex kUverbs(R"(uverbs\d+)");
  for (const auto& n : list_dir(devib)) {
    if (!std::regex_match(n, kUverbs)) continue;
    f.uverbs.push_back(n);
    const int fd = ::open((devib + "/" + n).c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      f.uverbs_unopenable.push_back(fmt::format("{} ({})", n, std::strerror(errno)));
    else
      ::close(fd);
  }
}

// --- memlock: what this process may pin (RDMA registers its buffers) ---
void probe_memlock(const std::string& root, FabricInfo& f) {
  if (auto limits = read_file(root + "/proc/self/limits")) {
    if (!parse_limits(*limits, f.memlock_soft, f.memlock_hard))
      f.notes.push_back(root + "/proc/self/limits has no readable \"Max locked memory\" line");
  } else if (root.empty()) {
    rlimit rl{};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
      f.memlock_soft = rl.rlim_cur == RLIM_INFINITY ? -1 : static_cast<std::int64_t>(rl.rlim_cur);
      f.memlock_hard = rl.rlim_max == RLIM_INFINITY ? -1 : static_cast<std::int64_t>(rl.rlim_max);
    }
  }
}

// --- GPUDirect RDMA: nvidia_peermem, or dma-buf (kernel >= 5.12, open GPU kernel module >= 515) ---
void probe_gpudirect(const std::string& root, FabricInfo& f) {
  const auto modules = read_file(root + "/proc/modules");
  auto module_loaded = [&](const char* m) {
    return exists(root + "/sys/module/" + m) ||
           (modules && (starts_with(*modules, std::string(m) + " ") ||
                        modules->find("\n" + std::string(m) + " ") != std::string::npos));
  };
  f.peermem_loaded = module_loaded("nvidia_peermem") || module_loaded("nv_peer_mem") ? 1 : 0;
  f.kernel = read_trimmed(root + "/proc/sys/kernel/osrelease");
  if (f.kernel.empty() && root.empty()) {
    utsname u{};
    if (uname(&u) == 0) f.kernel = u.release;
  }
  std::string driver;
  if (auto v = read_file(root + "/proc/driver/nvidia/version")) {
    const std::string first = v->substr(0, v->find('\n'));
    std::smatch m;
    if (std::regex_search(first, m, std::regex(R"(Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?))"))) driver = m[1];
    f.open_kernel_module = first.find("Open Kernel Module") != std::string::npos ? 1 : 0;
  }
  if (driver.empty()) {
    f.dmabuf = -1;
    f.dmabuf_why = "no NVIDIA kernel module loaded";
  } else {
    std::vector<std::string> no;
    if (f.kernel.empty())
      no.push_back("kernel version unknown");
    else if (compare_versions(f.kernel.substr(0, f.kernel.find_first_not_of("0123456789.")), "5.12") < 0)
      no.push_back("Linux " + f.kernel + " < 5.12");
    if (f.open_kernel_module == 0)
      no.push_back("the proprietary NVIDIA kernel module " + driver + " (dma-buf needs the open one)");
    if (compare_versions(driver, "515") < 0) no.push_back("driver " + driver + " < 515");
    f.dmabuf = no.empty() ? 1 : 0;
    f.dmabuf_why = no.empty() ? fmt::format("Linux {} >= 5.12, open GPU kernel module {} >= 515", f.kernel, driver)
                              : fmt::format("{}", fmt::join(no, "; "));
  }
}

// --- PCIe distance GPU ↔ HCA (what NCCL_NET_GDR_LEVEL is compared with) ---
void probe_gpu_nic(const std::string& root, const std::vector<std::string>& gpu_pci_bus_ids, FabricInfo& f) {
  const std::string ib = root + "/sys/class/infiniband";
  if (!gpu_pci_bus_ids.empty() && !f.hcas.empty()) {
    for (const auto& g : gpu_pci_bus_ids) {
      std::vector<std::string> row;
      std::error_code ec;
      const std::string gdir = root + "/sys/bus/pci/devices/" + sysfs_bdf(g);
      const fs::path gp = fs::canonical(gdir, ec);
      for (const auto& h : f.hcas) {
        std::error_code ec2;
        const std::string hdir = ib + "/" + h.name + "/device";
        const fs::path hp = fs::canonical(hdir, ec2);
        row.push_back(ec || ec2 ? std::string() : pci_distance(gp.string(), hp.string(), numa_of(gdir), numa_of(hdir)));
      }
      f.gpu_nic.push_back(std::move(row));
    }
  }
}

}  // namespace

FabricInfo probe_fabric(const std::string& root, const std::vector<std::string>& gpu_pci_bus_ids) {
  FabricInfo f;
  try {
    probe_hcas(root, f);
    probe_device_nodes(root, f);
    probe_memlock(root, f);
    probe_gpudirect(root, f);
    probe_gpu_nic(root, gpu_pci_bus_ids, f);
  } catch (const std::exception& e) {  // a filesystem error no check above foresaw: a note, never a crash
    f.notes.push_back(std::string("fabric probe stopped early: ") + e.what());
  }
  return f;
}

// --- NCCL's name lists ---
NcclNameList parse_nccl_name_list(std::string_view value) {
  NcclNameList l;
  std::string v = trim(value);
  if (!v.empty() && v[0] == '^') {
    l.exclude = true;
    v.erase(0, 1);
  }
  if (!v.empty() && v[0] == '=') {
    l.exact = true;
    v.erase(0, 1);
  }
  for (const auto& raw : split(v, ',')) {
    std::string e = trim(raw);
    if (e.empty()) continue;
    NcclNameEntry ne;
    const auto colon = e.find(':');
    if (colon != std::string::npos) {
      const std::string port = e.substr(colon + 1);
      ne.name = e.substr(0, colon);
      if (auto n = parse_integer(port); n && *n >= 0 && *n <= 65535) ne.port = static_cast<int>(*n);
    } else {
      ne.name = e;
    }
    l.entries.push_back(std::move(ne));
  }
  return l;
}

namespace {
bool entry_matches(const NcclNameList& l, const NcclNameEntry& e, const std::string& name,
                   const std::vector<int>& ports) {
  const bool name_ok = l.exact ? name == e.name : starts_with(name, e.name);
  if (!name_ok) return false;
  return e.port < 0 || std::find(ports.begin(), ports.end(), e.port) != ports.end();
}
}  // namespace

std::vector<std::string> nccl_names_missing(const NcclNameList& l,
                                            const std::vector<std::pair<std::string, std::vector<int>>>& available) {
  std::vector<std::string> out;
  for (const auto& e : l.entries) {
    const bool any = std::any_of(available.begin(), available.end(),
                                 [&](const auto& a) { return entry_matches(l, e, a.first, a.second); });
    if (!any) out.push_back(e.port < 0 ? e.name : fmt::format("{}:{}", e.name, e.port));
  }
  return out;
}

std::vector<std::string> nccl_names_selected(const NcclNameList& l,
                                             const std::vector<std::pair<std::string, std::vector<int>>>& available) {
  std::vector<std::string> out;
  for (const auto& a : available) {
    const bool hit = std::any_of(l.entries.begin(), l.entries.end(),
                                 [&](const NcclNameEntry& e) { return entry_matches(l, e, a.first, a.second); });
    if (hit != l.exclude) out.push_back(a.first);
  }
  return out;
}

// --- PCIe distance ---
std::string pci_distance(const std::string& path_a, const std::string& path_b, int numa_a, int numa_b) {
  // "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0" → {"pci0000:17", "0000:17:00.0", ...}
  auto parts = [](const std::string& p) {
    std::vector<std::string> out;
    bool seen_root = false;
    for (const auto& c : split(p, '/')) {
      if (starts_with(c, "pci") && c.find(':') != std::string::npos) seen_root = true;
      if (seen_root) out.push_back(c);
    }
    return out;
  };
  const auto a = parts(path_a), b = parts(path_b);
  if (a.empty() || b.empty()) return {};
  if (a[0] != b[0]) return numa_a >= 0 && numa_a == numa_b ? "NODE" : "SYS";
  std::size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  if (common <= 1) return "PHB";  // only the host bridge (root bus) in common
  // Below the deepest common PCI device: a switch's upstream port has the devices two levels down.
  const std::size_t depth = std::max(a.size(), b.size()) - common;
  return depth <= 2 ? "PIX" : "PXB";
}

int distance_rank(std::string_view w) {
  if (w == "LOC") return 0;
  if (w == "PIX") return 1;
  if (w == "PXB") return 2;
  if (w == "PHB" || w == "NODE") return 3;
  if (w == "SYS") return 4;
  return -1;
}

int gdr_level_rank(std::string_view value) {
  std::string v = trim(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::toupper(c); });
  if (v.size() == 1 && v[0] >= '0' && v[0] <= '4') return v[0] - '0';
  if (v == "NODE") return -1;  // not one of NCCL_NET_GDR_LEVEL's words
  return distance_rank(v);
}

}  // namespace trainbox::env
