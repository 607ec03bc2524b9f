// trainbox/env/fabric.h — the RDMA fabric as the doctor sees it: InfiniBand / RoCE HCAs from
// /sys/class/infiniband, /dev/infiniband/uverbs*, RLIMIT_MEMLOCK, GPUDirect RDMA (nvidia_peermem
// or dma-buf), the PCIe distance from each GPU to each HCA — and NCCL's name-list syntax, so the
// doctor can check NCCL_SOCKET_IFNAME / NCCL_IB_HCA against what this machine has.
//
// probe_fabric() reads only files under `root` (plus getrlimit when root/proc/self/limits is
// missing), so a fixture tree (tests/fixtures/fabric/<case>/{sys,proc,dev}) stands in for a
// machine. It never throws: what cannot be read becomes a note in FabricInfo::notes.
//
//   FabricInfo f = probe_fabric("", {"00000000:18:00.0"});   // this machine, one GPU
//   NcclNameList l = parse_nccl_name_list("^=mlx5_1:1,mlx5_2");
//   auto missing = nccl_names_missing(l, {{"mlx5_0", {1}}, {"mlx5_2", {1}}});   // {"mlx5_1:1"}
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <trainbox/env/report.h>

namespace trainbox::env {

// gpu_pci_bus_ids: the GPUs' PCI addresses as NVML gives them ("00000000:18:00.0"), in GPU
// order; they fill FabricInfo::gpu_nic. The driver version (kernel module) and whether it is the
// open kernel module come from root/proc/driver/nvidia/version.
FabricInfo probe_fabric(const std::string& root, const std::vector<std::string>& gpu_pci_bus_ids);

// NCCL's list syntax for NCCL_SOCKET_IFNAME and NCCL_IB_HCA (NCCL env docs): comma-separated
// entries; a leading '^' excludes the listed names instead of selecting them; a leading '='
// (after any '^') matches names exactly instead of as prefixes. NCCL_IB_HCA entries may carry a
// port ("mlx5_0:1"). "^=eth0,eth1" = every interface except exactly eth0 and eth1.
struct NcclNameEntry {
  std::string name;
  int port = -1;  // -1: any port
};
struct NcclNameList {
  bool exclude = false;
  bool exact = false;
  std::vector<NcclNameEntry> entries;
};
NcclNameList parse_nccl_name_list(std::string_view value);

// The entries of `list` that match nothing in `available` (device name and its ports; for
// interfaces pass no ports), written back as the user wrote them ("mlx5_9", "mlx5_0:2").
std::vector<std::string> nccl_names_missing(const NcclNameList& list,
                                            const std::vector<std::pair<std::string, std::vector<int>>>& available);
// Which of `available` NCCL would use under `list` (prefix or exact, include or exclude).
std::vector<std::string> nccl_names_selected(const NcclNameList& list,
                                             const std::vector<std::pair<std::string, std::vector<int>>>& available);

// PCIe distance between two devices from their sysfs paths (realpaths of
// /sys/bus/pci/devices/<bdf>), in NCCL's / nvidia-smi topo's words: "PIX" (one PCIe switch
// between them), "PXB" (several switches), "PHB" (the same host bridge), "NODE" (other host
// bridges, same NUMA node), "SYS" (across NUMA nodes). numa_a/numa_b: -1 unknown.
std::string pci_distance(const std::string& path_a, const std::string& path_b, int numa_a, int numa_b);

// NCCL_NET_GDR_LEVEL's value as a distance rank: LOC 0, PIX 1, PXB 2, PHB 3, SYS 4 (NCCL's names
// and its legacy integers 0..4; NCCL counts nvidia-smi's NODE as PHB). -1 when it is neither.
int gdr_level_rank(std::string_view value);
// The rank of a pci_distance() word, on the same scale (-1 for "").
int distance_rank(std::string_view word);

}  // namespace trainbox::env
