#include <trainbox/env/report.h>

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

#include "json_fields.h"

namespace trainbox::env {

// Field lists: one place per struct (json_fields.h). Keys missing from older or hand-written
// reports take the struct's defaults instead of failing.
TRAINBOX_JSON_FIELDS(HostInfo, hostname, os, kernel, arch, cpu_model, cpu_native_bf16, cpu_flags_source, cpu_cores,
                     cpu_affinity, mem_total_bytes, container, shm_bytes, nvidia_pci_devices)
TRAINBOX_JSON_FIELDS(DriverInfo, kernel_module_version, nvml_library_version, nvml_library_path, driver_version,
                     nvml_version, nvml_error, cuda_driver_version, libcuda_version, cuda_init_error, cuda_device_count,
                     forward_compat, device_nodes)
TRAINBOX_JSON_FIELDS(LibraryInfo, name, soname, loadable, path, version, error, stub)
TRAINBOX_JSON_FIELDS(TorchInfo, found, root, version, git_version, cuda_version, cudnn_version, nccl_version, arch_list,
                     arch_source, cxx11_abi, error)
TRAINBOX_JSON_FIELDS(GpuProcess, pid, name, used_bytes)
TRAINBOX_JSON_FIELDS(GpuInfo, index, name, uuid, pci_bus_id, brand, cc_major, cc_minor, mem_total_bytes, mem_used_bytes,
                     pcie_gen, pcie_width, mig_mode, persistence_mode, ecc_mode, ecc_errors_corrected,
                     ecc_errors_uncorrected, retired_pages_pending, remapped_rows_pending, remapped_rows_failed,
                     temperature_c, power_w, power_limit_w, util_gpu_pct, util_mem_pct, sm_clock_mhz, processes)
TRAINBOX_JSON_FIELDS(EnvVar, name, value, redacted)
TRAINBOX_JSON_FIELDS(EnvironmentInfo, cuda_visible_devices_set, cuda_visible_devices, nvidia_visible_devices_set,
                     nvidia_visible_devices, ld_library_path, vars, suspicious)
TRAINBOX_JSON_FIELDS(HcaPort, port, state, phys_state, rate, rate_gbps, link_layer, netdev)
TRAINBOX_JSON_FIELDS(HcaInfo, name, pci_address, firmware, ports)
TRAINBOX_JSON_FIELDS(FabricInfo, sysfs_present, hcas, netdevs, dev_infiniband, uverbs, uverbs_unopenable, memlock_soft,
                     memlock_hard, peermem_loaded, open_kernel_module, kernel, dmabuf, dmabuf_why, gpu_nic, notes)

const LibraryInfo* EnvReport::library(const std::string& name) const {
  for (const auto& l : libraries)
    if (l.name == name) return &l;
  return nullptr;
}

TRAINBOX_JSON_FIELDS(EnvReport, schema_version, trainbox_version, host, driver, libraries, torch, gpus, topology, env,
                     fabric, probe_ms)

nlohmann::json gpus_to_json(const std::vector<GpuInfo>& gpus) { return nlohmann::json(gpus); }

std::string to_json_string(const EnvReport& r, int indent) { return nlohmann::json(r).dump(indent); }

namespace {
// nlohmann turns a JSON float into an integer field with a plain cast, which is undefined
// behaviour when the value does not fit (2e88 into cpu_cores; found by tests/fuzz/fuzz_report).
// The report's only float fields (watts, milliseconds) are small: no number may reach 2^31.
void check_number_ranges(const nlohmann::json& root) {
  std::vector<const nlohmann::json*> todo{&root};  // a loop, not recursion: nesting depth is input
  while (!todo.empty()) {
    const nlohmann::json* v = todo.back();
    todo.pop_back();
    if (v->is_number_float() && !(std::fabs(v->get<double>()) < 2147483648.0))
      throw DataError("environment report has a number out of range: " + v->dump(),
                      "pass a file written by `trainbox doctor --json`");
    if (v->is_structured())
      for (const auto& child : *v) todo.push_back(&child);
  }
}
}  // namespace

namespace {
// nlohmann's messages start with "[json.exception.parse_error.101] ": for us, not for users.
std::string without_json_tag(std::string what) {
  if (what.rfind("[json.exception.", 0) == 0)
    if (auto close = what.find("] "); close != std::string::npos) what.erase(0, close + 2);
  return what;
}
}  // namespace

EnvReport report_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw DataError(std::string("environment report is not valid JSON: ") + without_json_tag(e.what()));
  }
  if (!j.is_object()) throw DataError("environment report must be a JSON object");
  if (j.contains("schema_version") && !j["schema_version"].is_number_integer())
    throw DataError("environment report's schema_version is not an integer");
  const auto schema = j.value("schema_version", std::int64_t{kReportSchemaVersion});
  if (schema > kReportSchemaVersion)
    throw DataError("environment report has schema_version " + std::to_string(schema) + ", this trainbox reads up to " +
                        std::to_string(kReportSchemaVersion),
                    "update trainbox");
  check_number_ranges(j);
  try {
    return j.get<EnvReport>();
  } catch (const nlohmann::json::exception& e) {
    throw DataError(std::string("environment report has a field of the wrong type: ") + without_json_tag(e.what()));
  }
}

EnvReport read_report_file(const std::string& path) {
  const char* hint = "pass a file written by `trainbox doctor --json`";
  auto text = read_file(path);
  if (!text) throw DataError("cannot read report " + path, hint);
  if (trim(*text).empty()) throw DataError("report " + path + " is empty", hint);
  auto j = nlohmann::json::parse(*text, nullptr, false);
  try {
    return report_from_json(j.is_object() && j.contains("report") ? j["report"].dump() : *text);
  } catch (const DataError& e) {  // name the file, and say how to get a good one
    throw DataError("report " + path + ": " + e.what(), e.hint().empty() ? hint : e.hint());
  }
}

}  // namespace trainbox::env
