#include <trainbox/env/render.h>

#include <fmt/format.h>

#include <trainbox/util/cpu_features.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/table.h>

namespace trainbox::env {
namespace {

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }
std::string num_or_dash(long long v) { return v < 0 ? "-" : std::to_string(v); }
std::string tri(int v, const char* on = "on", const char* off = "off") { return v < 0 ? "-" : v ? on : off; }

struct Counts {
  int errors = 0, warnings = 0, info = 0;
};
Counts count(const std::vector<Finding>& fs) {
  Counts c;
  for (const auto& f : fs)
    (f.severity == Severity::kError ? c.errors : f.severity == Severity::kWarning ? c.warnings : c.info)++;
  return c;
}

void section(std::string& out, const char* title) { out += fmt::format("\n{}\n", title); }
void kv(std::string& out, const char* key, const std::string& value) {
  out += fmt::format("  {:<22} {}\n", key, value);
}

// --- the report's sections, in the order render_text prints them ---
// Host: OS, CPUs, memory, container, /dev/shm, NVIDIA PCI functions.
void render_host(std::string& out, const EnvReport& r) {
  section(out, "Host");
  kv(out, "hostname", or_dash(r.host.hostname));
  kv(out, "os", fmt::format("{} (kernel {}, {})", or_dash(r.host.os), or_dash(r.host.kernel), or_dash(r.host.arch)));
  kv(out, "cpu",
     fmt::format("{} — {} CPUs online, {} usable", or_dash(r.host.cpu_model), num_or_dash(r.host.cpu_cores),
                 num_or_dash(r.host.cpu_affinity)));
  kv(out, "cpu bf16",
     r.host.cpu_flags_source.empty() ? "unknown (no CPU flags listed): train.amp = \"auto\" keeps fp32 on the CPU"
     : r.host.cpu_native_bf16
         ? fmt::format("native ({}): train.amp = \"auto\" trains in bf16 on the CPU", r.host.cpu_flags_source)
         : fmt::format("emulated, no {} in {}: train.amp = \"auto\" keeps fp32 on the CPU (bf16 there converts "
                       "every product to fp32, slower than fp32 itself)",
                       kBf16FlagNames, r.host.cpu_flags_source));
  kv(out, "memory", r.host.mem_total_bytes < 0 ? "-" : human_bytes(r.host.mem_total_bytes));
  kv(out, "container", r.host.container.empty() ? "none detected" : r.host.container);
  kv(out, "/dev/shm", r.host.shm_bytes < 0 ? "missing" : human_bytes(r.host.shm_bytes));
  kv(out, "NVIDIA PCI devices",
     r.host.nvidia_pci_devices.empty() ? "none" : fmt::format("{}", fmt::join(r.host.nvidia_pci_devices, " ")));
}

// Driver: kernel module, NVML, the CUDA driver API as cuInit saw it.
void render_driver(std::string& out, const EnvReport& r) {
  section(out, "Driver");
  const auto& d = r.driver;
  kv(out, "kernel module", d.kernel_module_version.empty() ? "not loaded" : d.kernel_module_version);
  kv(out, "driver (NVML)", d.driver_version.empty() ? "-" : d.driver_version);
  kv(out, "NVML",
     d.nvml_error.empty() ? fmt::format("{} ({})", or_dash(d.nvml_version), or_dash(d.nvml_library_path))
                          : "unavailable: " + d.nvml_error);
  kv(out, "CUDA (driver API)",
     d.cuda_driver_version < 0 ? "-"
                               : fmt::format("{}.{} ({})", d.cuda_driver_version / 1000,
                                             (d.cuda_driver_version % 1000) / 10, d.cuda_driver_version));
  kv(out, "cuInit",
     d.cuda_init_error.empty()
         ? (d.cuda_device_count >= 0 ? fmt::format("ok, {} device(s) visible", d.cuda_device_count) : "-")
         : d.cuda_init_error);
  kv(out, "forward compat", d.forward_compat ? "yes (cuda-compat libcuda " + d.libcuda_version + ")" : "no");
  kv(out, "device nodes", d.device_nodes.empty() ? "none" : fmt::format("{}", fmt::join(d.device_nodes, " ")));
}

// Libraries as torch resolves them (loadable, version, file).
void render_libraries(std::string& out, const EnvReport& r) {
  section(out, "Libraries (as torch resolves them)");
  Table libs({"library", "loadable", "version", "file / error"});
  for (const auto& l : r.libraries)
    libs.add_row(
        {l.name, l.loadable ? (l.stub ? "STUB" : "yes") : "no", or_dash(l.version), l.loadable ? l.path : l.error});
  out += libs.render("  ");
}

// LibTorch: the build facts read from its files.
void render_torch(std::string& out, const EnvReport& r) {
  section(out, "LibTorch");
  const auto& d = r.driver;
  if (!r.torch.found) {
    kv(out, "torch", "not found: " + r.torch.error);
  } else {
    kv(out, "version", or_dash(r.torch.version));
    kv(out, "location", r.torch.root);
    kv(out, "built for CUDA", r.torch.cuda_version.empty() ? "none (CPU-only build)" : r.torch.cuda_version);
    kv(out, "built with cuDNN", or_dash(r.torch.cudnn_version));
    kv(out, "built with NCCL", or_dash(r.torch.nccl_version));
    kv(out, "compiled archs", r.torch.arch_list.empty() ? "-" : fmt::format("{}", fmt::join(r.torch.arch_list, " ")));
    kv(out, "C++11 ABI", r.torch.cxx11_abi < 0 ? "-" : std::to_string(r.torch.cxx11_abi));
    kv(out, "torch sees CUDA",
       d.cuda_device_count > 0 ? fmt::format("yes, {} device(s) (cuDeviceGetCount, as torch will)", d.cuda_device_count)
                               : "no — CPU");
    if (!r.torch.error.empty()) kv(out, "note", r.torch.error);
  }
}

// GPUs (NVML) and, with more than one, the topology matrix.
void render_gpus(std::string& out, const EnvReport& r) {
  section(out, "GPUs (NVML)");
  if (r.gpus.empty()) {
    out += "  none\n";
  } else {
    Table t({"#", "name", "CC", "memory used/total", "PCIe", "MIG", "persist", "ECC (corr/uncorr)", "temp", "power",
             "util"});
    for (const auto& g : r.gpus) {
      t.add_row(
          {std::to_string(g.index), g.name, g.cc_major < 0 ? "-" : fmt::format("{}.{}", g.cc_major, g.cc_minor),
           g.mem_total_bytes < 0 ? "-"
                                 : fmt::format("{} / {}", human_bytes(std::max<std::int64_t>(0, g.mem_used_bytes)),
                                               human_bytes(g.mem_total_bytes)),
           g.pcie_gen < 0 ? "-" : fmt::format("gen{} x{}", g.pcie_gen, g.pcie_width), tri(g.mig_mode),
           tri(g.persistence_mode),
           g.ecc_mode != 1
               ? tri(g.ecc_mode)
               : fmt::format("on ({}/{})", num_or_dash(g.ecc_errors_corrected), num_or_dash(g.ecc_errors_uncorrected)),
           g.temperature_c < 0 ? "-" : fmt::format("{}C", g.temperature_c),
           g.power_w < 0 ? "-" : fmt::format("{:.0f}/{:.0f} W", g.power_w, g.power_limit_w),
           g.util_gpu_pct < 0 ? "-" : fmt::format("{}%", g.util_gpu_pct)});
    }
    out += t.render("  ");
    for (const auto& g : r.gpus)
      out += fmt::format("  GPU {}: {}  {}\n", g.index, or_dash(g.uuid), or_dash(g.pci_bus_id));
  }
  if (r.topology.size() > 1) {
    section(out, "Topology (nvidia-smi topo -m legend)");
    std::vector<std::string> head = {""};
    for (std::size_t i = 0; i < r.topology.size(); ++i) head.push_back("GPU" + std::to_string(i));
    Table t(head);
    for (std::size_t i = 0; i < r.topology.size(); ++i) {
      std::vector<std::string> row = {"GPU" + std::to_string(i)};
      row.insert(row.end(), r.topology[i].begin(), r.topology[i].end());
      t.add_row(row);
    }
    out += t.render("  ");
  }
}

// Fabric: HCA ports, /dev/infiniband, memlock, GPUDirect RDMA, GPU-HCA distances.
void render_fabric(std::string& out, const EnvReport& r) {
  section(out, "Fabric (RDMA: InfiniBand / RoCE)");
  const auto& fb = r.fabric;
  if (fb.hcas.empty()) {
    out += fb.sysfs_present ? "  /sys/class/infiniband is empty: no HCA\n" : "  no HCA (no /sys/class/infiniband)\n";
  } else {
    Table t({"HCA", "port", "state", "physical", "rate", "link layer", "netdev", "PCI", "firmware"});
    for (const auto& h : fb.hcas)
      for (const auto& p : h.ports)
        t.add_row({h.name, std::to_string(p.port), or_dash(p.state), or_dash(p.phys_state), or_dash(p.rate),
                   p.link_layer == "Ethernet" ? "Ethernet (RoCE)" : or_dash(p.link_layer), or_dash(p.netdev),
                   or_dash(h.pci_address), or_dash(h.firmware)});
    out += t.render("  ");
  }
  if (!fb.hcas.empty() || fb.dev_infiniband) {
    kv(out, "/dev/infiniband",
       !fb.dev_infiniband ? "missing"
       : fb.uverbs.empty()
           ? "no uverbs*"
           : fmt::format("{}{}", fmt::join(fb.uverbs, " "),
                         fb.uverbs_unopenable.empty()
                             ? std::string(" (open ok)")
                             : fmt::format(" — cannot open {}", fmt::join(fb.uverbs_unopenable, ", "))));
  }
  auto limit = [](std::int64_t v) {
    return v == -1 ? std::string("unlimited") : v < 0 ? std::string("-") : human_bytes(static_cast<std::uint64_t>(v));
  };
  kv(out, "memlock (soft/hard)", fmt::format("{} / {}", limit(fb.memlock_soft), limit(fb.memlock_hard)));
  const std::string peermem = fb.peermem_loaded == 1   ? "nvidia_peermem loaded"
                              : fb.peermem_loaded == 0 ? "no nvidia_peermem"
                                                       : "-";
  const std::string dmabuf = fb.dmabuf == 1   ? "dma-buf possible (" + fb.dmabuf_why + ")"
                             : fb.dmabuf == 0 ? "no dma-buf (" + fb.dmabuf_why + ")"
                                              : "dma-buf: " + or_dash(fb.dmabuf_why);
  kv(out, "GPUDirect RDMA",
     fb.peermem_loaded < 0 && fb.dmabuf < 0 && fb.dmabuf_why.empty()
         ? std::string("- (not probed)")
         : fmt::format("{}: {}; {}", fb.peermem_loaded == 1 || fb.dmabuf == 1 ? "available" : "not available", peermem,
                       dmabuf));
  if (!fb.gpu_nic.empty() && !fb.hcas.empty()) {
    out += "  GPU-HCA PCIe distance (PIX < PXB < PHB/NODE < SYS; NCCL_NET_GDR_LEVEL compares with these):\n";
    std::vector<std::string> head = {""};
    for (const auto& h : fb.hcas) head.push_back(h.name);
    Table t(head);
    for (std::size_t g = 0; g < fb.gpu_nic.size(); ++g) {
      std::vector<std::string> row = {"GPU" + std::to_string(g)};
      for (const auto& d : fb.gpu_nic[g]) row.push_back(or_dash(d));
      row.resize(head.size(), "-");
      t.add_row(row);
    }
    out += t.render("  ");
  }
  for (const auto& n : fb.notes) kv(out, "note", n);
}

// Environment: the variables that decide what the GPU stack sees.
void render_environment(std::string& out, const EnvReport& r) {
  section(out, "Environment");
  kv(out, "CUDA_VISIBLE_DEVICES",
     r.env.cuda_visible_devices_set ? "\"" + r.env.cuda_visible_devices + "\"" : "(unset)");
  kv(out, "NVIDIA_VISIBLE_DEVICES",
     r.env.nvidia_visible_devices_set ? "\"" + r.env.nvidia_visible_devices + "\"" : "(unset)");
  kv(out, "LD_LIBRARY_PATH",
     r.env.ld_library_path.empty() ? "(unset)" : fmt::format("{}", fmt::join(r.env.ld_library_path, ":")));
  for (const auto& v : r.env.vars) kv(out, v.name.c_str(), v.value);
}

}  // namespace

std::string render_findings(const std::vector<Finding>& findings, const RenderOptions& o) {
  std::string out;
  auto paint = [&](Severity s, const std::string& t) {
    if (!o.color) return t;
    const char* c = s == Severity::kError ? "\033[1;31m" : s == Severity::kWarning ? "\033[1;33m" : "\033[1;36m";
    return std::string(c) + t + "\033[0m";
  };
  for (const auto& f : findings) {
    out += fmt::format("  {} {}: {}\n", paint(f.severity, fmt::format("[{}]", severity_name(f.severity))), f.id,
                       f.message);
    out += fmt::format("      fix: {}\n", f.fix);
  }
  Counts c = count(findings);
  out += fmt::format("doctor: {} error{}, {} warning{}, {} info{}\n", c.errors, c.errors == 1 ? "" : "s", c.warnings,
                     c.warnings == 1 ? "" : "s", c.info,
                     findings.empty() ? " — all checks passed" : " (long forms: docs/troubleshooting.md#<id>)");
  return out;
}

std::string render_text(const EnvReport& r, const std::vector<Finding>& findings, const RenderOptions& o) {
  std::string out = fmt::format("trainbox doctor {} — probed in {:.1f} ms\n", or_dash(r.trainbox_version), r.probe_ms);
  for (auto* render_section :
       {render_host, render_driver, render_libraries, render_torch, render_gpus, render_fabric, render_environment})
    render_section(out, r);
  section(out, "Findings");
  out += render_findings(findings, o);
  return out;
}

nlohmann::json findings_to_json(const std::vector<Finding>& findings) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& f : findings)
    a.push_back({{"severity", severity_name(f.severity)},
                 {"id", f.id},
                 {"message", f.message},
                 {"fix", f.fix},
                 {"gpu", f.gpu}});
  return a;
}

nlohmann::json doctor_json(const EnvReport& report, const std::vector<Finding>& findings) {
  Counts c = count(findings);
  return {{"report", report},
          {"findings", findings_to_json(findings)},
          {"summary", {{"errors", c.errors}, {"warnings", c.warnings}, {"info", c.info}}}};
}

}  // namespace trainbox::env
