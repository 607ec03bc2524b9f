// The fabric from fake sysfs/proc/dev trees (tests/fixtures/fabric/, made by make-trees.py):
// each tree is probed with probe()'s root option, merged into the 8-GPU H100 fixture report
// (whose GPU PCI addresses the trees reproduce) and diagnosed; and the same trees as
// `trainbox preflight` sees them (FabricPreflight: the RDMA ports, the socket-fallback verdict).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "fixtures.h"
#include "temp_dir.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/env/fabric.h>
#include <trainbox/env/preflight.h>
#include <trainbox/env/probe.h>
#include <trainbox/env/render.h>

using namespace trainbox;
using env::Severity;
namespace fs = std::filesystem;

namespace {

std::string tree(const std::string& name) { return test::source_dir() + "/tests/fixtures/fabric/" + name; }

// The H100 ×8 report with this tree's fabric, environment and container marker.
env::EnvReport node(const std::string& name) {
  env::EnvReport r = test::fixture("h100x8-nvlink.json");
  test::TempDir empty;
  env::ProbeOptions o;
  o.root = tree(name);
  o.library_path = {empty.path};
  o.library_path_only = true;
  o.gpu_processes = false;
  const env::EnvReport probed = env::probe(o);
  std::vector<std::string> bus;
  for (const auto& g : r.gpus) bus.push_back(g.pci_bus_id);
  r.fabric = env::probe_fabric(o.root, bus);
  r.env = probed.env;
  r.host.container = probed.host.container;
  return r;
}

std::set<std::string> ids(const std::vector<env::Finding>& fs) {
  std::set<std::string> out;
  for (const auto& f : fs) out.insert(f.id);
  return out;
}

const env::Finding* find(const std::vector<env::Finding>& fs, const std::string& id) {
  for (const auto& f : fs)
    if (f.id == id) return &f;
  return nullptr;
}

}  // namespace

// --- the trees named in the issue, each with its verdict ---
struct TreeCase {
  std::string tree;
  std::set<std::string> expected;  // exactly these finding ids
  int exit_code;
};
class FabricTrees : public ::testing::TestWithParam<TreeCase> {};

TEST_P(FabricTrees, ExactlyTheExpectedFindings) {
  const auto& c = GetParam();
  const auto fs = env::diagnose(node(c.tree));
  EXPECT_EQ(ids(fs), c.expected);
  EXPECT_EQ(env::exit_code(fs, false), c.exit_code);
  for (const auto& f : fs) {
    EXPECT_FALSE(f.fix.empty()) << f.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Trees, FabricTrees,
                         ::testing::Values(TreeCase{"healthy-8hca", {}, 0}, TreeCase{"hca-down", {"rdma-port-down"}, 0},
                                           TreeCase{"roce", {}, 0},
                                           TreeCase{"no-dev-infiniband", {"rdma-devices-missing"}, 1},
                                           TreeCase{"memlock-64k", {"memlock-too-small"}, 1},
                                           TreeCase{"nccl-ib-hca-missing", {"nccl-names-missing"}, 0},
                                           TreeCase{"peermem-missing-dmabuf", {}, 0}),
                         [](const auto& info) {
                           std::string n = info.param.tree;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(FabricProbe, HealthyNodeReadsEveryHcaPortAndDistance) {
  const env::EnvReport r = node("healthy-8hca");
  const auto& f = r.fabric;
  ASSERT_EQ(f.hcas.size(), 8u);
  EXPECT_EQ(f.hcas[0].name, "mlx5_0");
  EXPECT_EQ(f.hcas[0].pci_address, "0000:19:00.0");
  EXPECT_EQ(f.hcas[0].firmware, "28.41.1000");
  ASSERT_EQ(f.hcas[0].ports.size(), 1u);
  const auto& p = f.hcas[0].ports[0];
  EXPECT_EQ(p.state, "ACTIVE");
  EXPECT_EQ(p.phys_state, "LinkUp");
  EXPECT_EQ(p.rate_gbps, 400);
  EXPECT_EQ(p.link_layer, "InfiniBand");
  EXPECT_EQ(p.netdev, "ibp25s0");  // the IPoIB netdev under the PCI device (dev_port 0 = port 1)
  EXPECT_EQ(f.uverbs.size(), 8u);
  EXPECT_TRUE(f.uverbs_unopenable.empty());
  EXPECT_EQ(f.memlock_soft, -1);
  EXPECT_EQ(f.peermem_loaded, 1);
  EXPECT_EQ(f.open_kernel_module, 0);
  EXPECT_EQ(f.dmabuf, 0);  // proprietary module: no dma-buf, peermem carries GPUDirect RDMA
  ASSERT_EQ(f.gpu_nic.size(), 8u);
  EXPECT_EQ(f.gpu_nic[0][0], "PIX");   // GPU 0 and mlx5_0 share a PCIe switch
  EXPECT_EQ(f.gpu_nic[0][1], "NODE");  // another host bridge, same NUMA node
  EXPECT_EQ(f.gpu_nic[0][4], "SYS");   // the other socket
  EXPECT_EQ(f.gpu_nic[7][7], "PIX");
  EXPECT_TRUE(f.notes.empty());
  // The report shows it next to the GPU topology.
  const std::string text = env::render_text(r, {}, {});
  EXPECT_NE(text.find("Fabric (RDMA"), std::string::npos);
  EXPECT_NE(text.find("400 Gb/sec (4X NDR)"), std::string::npos);
  EXPECT_NE(text.find("GPU-HCA PCIe distance"), std::string::npos);
  EXPECT_NE(text.find("Topology"), std::string::npos);
}

TEST(FabricProbe, TheFullProbeFillsTheFabricFromItsRoot) {
  test::TempDir empty;
  env::ProbeOptions o;
  o.root = tree("roce");
  o.library_path = {empty.path};
  o.library_path_only = true;
  const env::EnvReport r = env::probe(o);
  ASSERT_EQ(r.fabric.hcas.size(), 8u);
  EXPECT_EQ(r.fabric.hcas[2].ports[0].link_layer, "Ethernet");
  EXPECT_EQ(r.fabric.hcas[2].ports[0].netdev, "ens3f0np0");  // from the GID table
  EXPECT_EQ(r.fabric.hcas[2].ports[0].rate_gbps, 200);
  // The tree's proc/self/environ, not this process's environment.
  bool seen = false;
  for (const auto& v : r.env.vars) seen |= v.name == "NCCL_SOCKET_IFNAME" && v.value == "bond0";
  EXPECT_TRUE(seen);
  EXPECT_EQ(env::to_json_string(env::report_from_json(env::to_json_string(r))), env::to_json_string(r));
}

TEST(FabricVerdicts, HcaDownNamesThePortAndTheRailsLeft) {
  const auto fs = env::diagnose(node("hca-down"));
  const auto* f = find(fs, "rdma-port-down");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_NE(f->message.find("mlx5_3 port 1 (InfiniBand, ibp94s0) is DOWN (physical Disabled)"), std::string::npos)
      << f->message;
  EXPECT_NE(f->message.find("7 of 8"), std::string::npos) << f->message;
}

TEST(FabricVerdicts, EveryPortDownOnAGpuNodeIsAnError) {
  env::EnvReport r = node("healthy-8hca");
  for (auto& h : r.fabric.hcas) h.ports[0].state = "DOWN";
  EXPECT_EQ(find(env::diagnose(r), "rdma-port-down")->severity, Severity::kError);
}

TEST(FabricVerdicts, ContainerWithoutDevInfinibandSaysHowToPassThem) {
  const auto fs = env::diagnose(node("no-dev-infiniband"));
  const auto* f = find(fs, "rdma-devices-missing");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("/dev/infiniband does not exist"), std::string::npos) << f->message;
  EXPECT_NE(f->fix.find("--device=/dev/infiniband"), std::string::npos) << f->fix;
  EXPECT_NE(f->fix.find("RDMA device plugin"), std::string::npos) << f->fix;
}

TEST(FabricVerdicts, UnopenableUverbsIsNamed) {
  // A uverbs "device" that open(O_RDWR) refuses: a directory (EISDIR), as any user sees it.
  test::TempDir root;
  fs::copy(tree("healthy-8hca"), root.path, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove(root.path + "/dev/infiniband/uverbs2");
  fs::create_directories(root.path + "/dev/infiniband/uverbs2");
  env::EnvReport r = node("healthy-8hca");
  r.fabric = env::probe_fabric(root.path, {});
  ASSERT_EQ(r.fabric.uverbs_unopenable.size(), 1u);
  const auto found1 = env::diagnose(r);

  const auto* f = find(found1, "rdma-devices-missing");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("/dev/infiniband/uverbs2 (Is a directory) cannot be opened"), std::string::npos)
      << f->message;
  EXPECT_NE(f->fix.find("modprobe ib_uverbs"), std::string::npos) << f->fix;  // not in a container
}

TEST(FabricVerdicts, Memlock64KiB) {
  const env::EnvReport r = node("memlock-64k");
  EXPECT_EQ(r.fabric.memlock_soft, 65536);
  const auto found2 = env::diagnose(r);

  const auto* f = find(found2, "memlock-too-small");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("64.0 KiB"), std::string::npos) << f->message;
  EXPECT_NE(f->fix.find("limits.conf"), std::string::npos) << f->fix;
}

TEST(FabricVerdicts, IbHcaNamingAMissingDevice) {
  const auto found3 = env::diagnose(node("nccl-ib-hca-missing"));

  const auto* f = find(found3, "nccl-names-missing");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kWarning);  // mlx5_0 still matches
  EXPECT_NE(f->message.find("NCCL_IB_HCA=\"mlx5_0,mlx5_8\" names mlx5_8"), std::string::npos) << f->message;
  EXPECT_NE(f->message.find("NCCL uses mlx5_0"), std::string::npos) << f->message;
}

TEST(FabricVerdicts, IbHcaMatchingNothingIsAnError) {
  env::EnvReport r = node("healthy-8hca");
  r.env.vars.push_back({"NCCL_IB_HCA", "=mlx5_1:2", false});  // exact name, but port 2 does not exist
  const auto found4 = env::diagnose(r);

  const auto* f = find(found4, "nccl-names-missing");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->message.find("mlx5_1:2"), std::string::npos) << f->message;
}

TEST(FabricVerdicts, SocketIfnameIsCheckedAgainstTheInterfaces) {
  env::EnvReport r = node("healthy-8hca");
  for (auto& v : r.env.vars)
    if (v.name == "NCCL_SOCKET_IFNAME") v.value = "eth";  // a prefix: no eth* here
  const auto found5 = env::diagnose(r);

  const auto* f = find(found5, "nccl-names-missing");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->message.find("bond0"), std::string::npos) << f->message;  // what the machine has
  for (auto& v : r.env.vars)
    if (v.name == "NCCL_SOCKET_IFNAME") v.value = "^docker,lo";  // excluding a missing one: harmless but named
  const auto found6 = env::diagnose(r);

  f = find(found6, "nccl-names-missing");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kWarning);
  for (auto& v : r.env.vars)
    if (v.name == "NCCL_SOCKET_IFNAME") v.value = "=bond0";
  EXPECT_EQ(find(env::diagnose(r), "nccl-names-missing"), nullptr);
}

TEST(FabricVerdicts, IbDisableWithActiveHcas) {
  env::EnvReport r = node("healthy-8hca");
  r.env.vars.push_back({"NCCL_IB_DISABLE", "1", false});
  const auto found7 = env::diagnose(r);

  const auto* f = find(found7, "nccl-ib-disabled");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kError);
  r.env.vars.back().value = "0";
  EXPECT_EQ(find(env::diagnose(r), "nccl-ib-disabled"), nullptr);
}

TEST(FabricVerdicts, PeermemMissingWhileDmabufIsAvailable) {
  const env::EnvReport r = node("peermem-missing-dmabuf");
  EXPECT_EQ(r.fabric.peermem_loaded, 0);
  EXPECT_EQ(r.fabric.open_kernel_module, 1);
  EXPECT_EQ(r.fabric.dmabuf, 1) << r.fabric.dmabuf_why;
  EXPECT_NE(env::render_text(r, {}, {}).find("GPUDirect RDMA         available: no nvidia_peermem; dma-buf possible"),
            std::string::npos);
  // The same node with dma-buf turned off by NCCL_DMABUF_ENABLE=0: no GPUDirect RDMA at all.
  env::EnvReport off = r;
  off.env.vars.push_back({"NCCL_DMABUF_ENABLE", "0", false});
  const auto found8 = env::diagnose(off);

  const auto* f = find(found8, "gdr-unavailable");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("NCCL_DMABUF_ENABLE=0"), std::string::npos) << f->message;
}

TEST(FabricVerdicts, NoPeermemOnTheProprietaryModuleIsGdrUnavailable) {
  env::EnvReport r = node("healthy-8hca");
  r.fabric.peermem_loaded = 0;
  const auto found9 = env::diagnose(r);

  const auto* f = find(found9, "gdr-unavailable");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("proprietary"), std::string::npos) << f->message;
  EXPECT_NE(f->fix.find("modprobe nvidia_peermem"), std::string::npos);
}

TEST(FabricVerdicts, GdrLevelAgainstTheTopology) {
  env::EnvReport r = node("healthy-8hca");
  r.env.vars.push_back({"NCCL_NET_GDR_LEVEL", "PIX", false});
  EXPECT_EQ(find(env::diagnose(r), "nccl-gdr-level-conflict"), nullptr);  // every GPU has a PIX HCA
  r.env.vars.back().value = "LOC";
  EXPECT_NE(find(env::diagnose(r), "nccl-gdr-level-conflict"), nullptr);
  r.env.vars.back().value = "PIX";
  for (auto& row : r.fabric.gpu_nic)
    for (auto& d : row)
      if (d == "PIX") d = "PHB";  // no HCA next to any GPU
  const auto found10 = env::diagnose(r);

  const auto* f = find(found10, "nccl-gdr-level-conflict");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("never used"), std::string::npos) << f->message;
  r.env.vars.back().value = "SOMEWHERE";
  EXPECT_NE(find(env::diagnose(r), "nccl-gdr-level-conflict")->message.find("not a level"), std::string::npos);
}

TEST(FabricVerdicts, NoHcaNoFabricFindings) {
  env::EnvReport r = test::fixture("h100x8-nvlink.json");  // NCCL_SOCKET_IFNAME=bond0, nothing probed
  EXPECT_TRUE(ids(env::diagnose(r)).empty());
}

// --- bad input: never a crash, always a note ---
TEST(FabricBadInput, MalformedAndVanishingSysfsBecomeNotes) {
  test::TempDir root;
  root.write("sys/class/infiniband/mlx5_0/ports/1/state", "garbage without a number\n");
  root.write("sys/class/infiniband/mlx5_0/ports/1/rate", "fast\n");
  root.write("sys/class/infiniband/mlx5_0/ports/x/state", "4: ACTIVE\n");
  fs::create_directories(root.path + "/sys/class/infiniband/mlx5_1/ports/1");  // vanished: no files left
  fs::create_directories(root.path + "/sys/class/infiniband/mlx5_2");          // no ports at all
  root.write("proc/self/limits", "Max locked memory  lots  more  bytes\n");
  root.write("proc/driver/nvidia/version", "\n");
  const env::FabricInfo f = env::probe_fabric(root.path, {"not-a-bus-id"});
  ASSERT_EQ(f.hcas.size(), 3u);
  EXPECT_EQ(f.hcas[0].ports.size(), 1u);
  EXPECT_EQ(f.hcas[0].ports[0].state, "garbage without a number");
  EXPECT_EQ(f.hcas[0].ports[0].rate_gbps, -1);
  EXPECT_EQ(f.hcas[1].ports[0].state, "UNKNOWN");
  EXPECT_EQ(f.memlock_soft, -2);
  std::string notes;
  for (const auto& n : f.notes) notes += n + "\n";
  EXPECT_NE(notes.find("\"x\" is not a number"), std::string::npos) << notes;
  EXPECT_NE(notes.find("mlx5_1 port 1"), std::string::npos) << notes;
  EXPECT_NE(notes.find("mlx5_2: no ports"), std::string::npos) << notes;
  EXPECT_NE(notes.find("Max locked memory"), std::string::npos) << notes;
  env::EnvReport r = test::fixture("h100x8-nvlink.json");
  r.fabric = f;
  const auto fs = env::diagnose(r);
  EXPECT_NE(find(fs, "fabric-probe-incomplete"), nullptr);
  EXPECT_FALSE(env::render_text(r, fs, {}).empty());
}

TEST(FabricBadInput, AClassDirectoryThatCannotBeListedIsANote) {
  // Not a directory (a broken sysfs mount, a bind-mounted file): the listing fails as it does for
  // an unreadable one, and this fails the same way for root, who reads a mode-000 folder anyway.
  test::TempDir root;
  fs::create_directories(root.path + "/sys/class");
  std::ofstream(root.path + "/sys/class/infiniband") << "not a directory\n";
  const env::FabricInfo f = env::probe_fabric(root.path, {});
  ASSERT_EQ(f.notes.size(), 1u);
  EXPECT_NE(f.notes[0].find("cannot be listed"), std::string::npos) << f.notes[0];
  EXPECT_TRUE(f.hcas.empty());
}

// --- the facts the verdicts stand on ---
TEST(NcclNameLists, PrefixExactExcludeAndPorts) {
  const std::vector<std::pair<std::string, std::vector<int>>> hcas = {
      {"mlx5_0", {1}}, {"mlx5_1", {1}}, {"mlx5_10", {1, 2}}};
  auto sel = [&](const char* v) { return env::nccl_names_selected(env::parse_nccl_name_list(v), hcas); };
  auto miss = [&](const char* v) { return env::nccl_names_missing(env::parse_nccl_name_list(v), hcas); };
  using V = std::vector<std::string>;
  EXPECT_EQ(sel("mlx5_1"), (V{"mlx5_1", "mlx5_10"}));  // a prefix
  EXPECT_EQ(sel("=mlx5_1"), (V{"mlx5_1"}));            // exact
  EXPECT_EQ(sel("^mlx5_1"), (V{"mlx5_0"}));            // excluded, as prefix
  EXPECT_EQ(sel("^=mlx5_1"), (V{"mlx5_0", "mlx5_10"}));
  EXPECT_EQ(sel("mlx5_10:2"), (V{"mlx5_10"}));
  EXPECT_EQ(miss("mlx5_0:2,mlx5_10:2, mlx5_9"), (V{"mlx5_0:2", "mlx5_9"}));
  EXPECT_EQ(miss("=mlx5"), (V{"mlx5"}));  // exact: no device is called just "mlx5"
  EXPECT_TRUE(miss("mlx5").empty());
  EXPECT_TRUE(env::parse_nccl_name_list("  ").entries.empty());
  EXPECT_TRUE(env::parse_nccl_name_list("^=").exact);
}

TEST(PciDistance, NvidiaSmiWords) {
  const std::string sw = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0";
  EXPECT_EQ(env::pci_distance(sw + "/0000:17:00.0/0000:18:00.0", sw + "/0000:17:01.0/0000:19:00.0", 0, 0), "PIX");
  EXPECT_EQ(env::pci_distance(sw + "/0000:17:00.0/0000:20:00.0/0000:21:00.0/0000:22:00.0",
                              sw + "/0000:17:01.0/0000:19:00.0", 0, 0),
            "PXB");
  EXPECT_EQ(env::pci_distance("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0",
                              "/sys/devices/pci0000:15/0000:15:02.0/0000:26:00.0", 0, 0),
            "PHB");
  EXPECT_EQ(env::pci_distance("/sys/devices/pci0000:15/0000:15:01.0", "/sys/devices/pci0000:27/0000:27:01.0", 0, 0),
            "NODE");
  EXPECT_EQ(env::pci_distance("/sys/devices/pci0000:15/0000:15:01.0", "/sys/devices/pci0000:97/0000:97:01.0", 0, 1),
            "SYS");
  EXPECT_EQ(env::pci_distance("/sys/devices/platform/x", "/sys/devices/pci0000:97/0000:97:01.0", 0, 1), "");
  EXPECT_EQ(env::gdr_level_rank("pxb"), 2);
  EXPECT_EQ(env::gdr_level_rank("3"), 3);
  EXPECT_EQ(env::gdr_level_rank("9"), -1);
  EXPECT_LT(env::distance_rank("PIX"), env::distance_rank("NODE"));
}

// --- preflight: the node's RDMA ports from its tree, and "a socket fallback next to active HCAs
// fails" (README; env/preflight.h add_fabric_facts, socket_fallback_error, compare_nodes) ---
namespace {
env::NodeFacts preflight_node(int rank, const std::string& host, const std::string& tree_name,
                              const std::string& transport) {
  env::NodeFacts f;
  f.node_rank = rank;
  f.host = host;
  f.torch = "2.11.0+cu130";
  f.gpu_count = 8;
  f.shm_bytes = 64LL << 30;
  f.transport = transport;
  if (!tree_name.empty()) env::add_fabric_facts(node(tree_name), f);
  return f;
}
}  // namespace

TEST(FabricPreflight, TheActivePortsOfATreeAreTheNodesRdmaPorts) {
  const auto healthy = preflight_node(0, "n1", "healthy-8hca", "NET/IB");
  ASSERT_EQ(healthy.rdma_ports.size(), 8u);
  EXPECT_EQ(healthy.rdma_ports[0], "mlx5_0:1 InfiniBand 400 Gb/s ibp25s0");
  EXPECT_TRUE(healthy.fabric_findings.empty());
  const auto down = preflight_node(0, "n1", "hca-down", "NET/IB");  // mlx5_3's port is DOWN
  ASSERT_EQ(down.rdma_ports.size(), 7u);
  for (const auto& p : down.rdma_ports) EXPECT_NE(p.rfind("mlx5_3:", 0), 0u) << p;
  const auto roce = preflight_node(0, "n1", "roce", "NET/IB");
  ASSERT_EQ(roce.rdma_ports.size(), 8u);
  EXPECT_EQ(roce.rdma_ports[2], "mlx5_2:1 RoCE 200 Gb/s ens3f0np0");
  // A port whose rate and netdev are unknown.
  env::EnvReport r = node("healthy-8hca");
  r.fabric.hcas.resize(1);
  r.fabric.hcas[0].ports[0].rate_gbps = 0;
  r.fabric.hcas[0].ports[0].netdev.clear();
  env::NodeFacts one;
  env::add_fabric_facts(r, one);
  EXPECT_EQ(one.rdma_ports, (std::vector<std::string>{"mlx5_0:1 InfiniBand ?"}));
}

TEST(FabricPreflight, ASocketFallbackNextToActiveHcasFailsNamingTheCause) {
  // node 1: 8 active ports but no /dev/infiniband in its container, and NCCL chose sockets
  const auto c = env::compare_nodes(
      {preflight_node(0, "n1", "healthy-8hca", "NET/IB"), preflight_node(1, "n2", "no-dev-infiniband", "NET/Socket")});
  ASSERT_EQ(c.errors.size(), 1u);
  const std::string& e = c.errors[0];
  EXPECT_EQ(e.rfind("node 1 (n2) fell back to TCP sockets (NCCL NET/Socket) although 8 RDMA ports are active "
                    "(mlx5_0:1 InfiniBand 400 Gb/s ibp25s0, mlx5_1:1 InfiniBand 400 Gb/s ",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find("); likely cause: rdma-devices-missing: "), std::string::npos) << e;
  ASSERT_EQ(c.node_problems.size(), 1u);  // node 1 only: node 0 is on NET/IB
  EXPECT_EQ(c.node_problems.at(1), c.errors);
  EXPECT_EQ(env::socket_fallback_error(preflight_node(1, "n2", "no-dev-infiniband", "NET/Socket")), e);
}

TEST(FabricPreflight, ASocketFallbackOnAHealthyFabricPointsAtNcclsLog) {
  const auto e = env::socket_fallback_error(preflight_node(1, "n2", "healthy-8hca", "NET/Socket"));
  EXPECT_NE(e.find("although 8 RDMA ports are active"), std::string::npos) << e;
  EXPECT_NE(e.find("; the doctor finds nothing wrong with the fabric: check NCCL's log (NCCL_DEBUG=INFO"),
            std::string::npos)
      << e;
  auto single = preflight_node(1, "n2", "", "NET/Socket");
  single.rdma_ports = {"mlx5_0:1 InfiniBand 400 Gb/s ib0"};
  EXPECT_NE(
      env::socket_fallback_error(single).find("although 1 RDMA port is active (mlx5_0:1 InfiniBand 400 Gb/s ib0)"),
      std::string::npos)
      << env::socket_fallback_error(single);
}

TEST(FabricPreflight, SocketsWithoutHcasAndIbNextToThemPass) {
  // a TCP-only cluster (no HCA), RDMA where there are HCAs, and a transport NCCL never reported
  const auto c =
      env::compare_nodes({preflight_node(0, "n1", "", "NET/Socket"), preflight_node(1, "n2", "healthy-8hca", "NET/IB"),
                          preflight_node(2, "n3", "roce", "")});
  EXPECT_TRUE(c.errors.empty()) << c.errors[0];
  EXPECT_TRUE(c.node_problems.empty());
}
