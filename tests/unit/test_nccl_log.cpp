// The NCCL INFO-line parser against lines NCCL really writes. Sources, line by line:
//  - logs users posted from real runs, quoted verbatim: NVIDIA/nccl-tests issue #185 (NCCL 2.19.3,
//    RoCE on DGX H100), Mellanox/nv_peer_memory issue #56 (NCCL 2.4.7, IB and IPoIB sockets),
//    NVIDIA/nccl issue #952 ("NET/IB : No device found");
//  - NCCL's own format strings, filled in as NCCL fills them: src/transport/net.cc
//    ("Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s", GDRDMA / (PCI) / Shared),
//    src/transport/p2p.cc ("… via P2P/%s%s%s", CUMEM / IPC), src/transport/shm.cc
//    ("Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s"), src/transport/net_ib.cc ("NET/IB : GPU
//    Direct RDMA Disabled for HCA %d '%s' (no module)"), src/init.cc ("Using network %s").
#include <gtest/gtest.h>

#include <trainbox/env/nccl_log.h>

using namespace trainbox;

namespace {

// NVIDIA/nccl-tests#185: two DGX H100 nodes over RoCE (verbatim).
const char* kRoceLog =
    "dgxh100-4:460770:460770 [0] NCCL INFO Bootstrap : Using enp220s0np0:11.1.128.136<0>\n"
    "dgxh100-4:460770:460770 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No "
    "such file or directory No plugin found (libnccl-net.so), using internal implementation\n"
    "dgxh100-4:460770:460770 [0] NCCL INFO cudaDriverVersion 12000\n"
    "NCCL version 2.19.3+cuda12.3\n"
    "dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB "
    "enp220s0np0:11.1.128.136<0>\n"
    "dgxh100-4:460770:460842 [0] NCCL INFO Using non-device net plugin version 0\n"
    "dgxh100-4:460770:460842 [0] NCCL INFO Using network IB\n";

// Mellanox/nv_peer_memory#56 (verbatim): the socket transport over IPoIB and the IB device list.
const char* kIpoibLog =
    "master_node:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>\n"
    "master_node:20:289 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).\n"
    "master_node:20:289 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.\n"
    "master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>\n"
    "NCCL version 2.4.7+cuda10.0\n";

}  // namespace

// The three verdicts preflight prints for a transport: its kind, GPUDirect RDMA, the summary line.
void expect_transport(const env::NcclTransport& t, const std::string& kind, int gdr, const std::string& summary) {
  EXPECT_EQ(env::transport_kind(t), kind);
  EXPECT_EQ(env::transport_gdr(t), gdr);
  EXPECT_EQ(env::transport_summary(t), summary);
}

TEST(NcclLog, RoceNodeNamesItsDevicesAndNetwork) {
  std::string log = kRoceLog;
  // net.cc's channel lines for this node: device 0, with and without GPUDirect RDMA.
  log += "dgxh100-4:460770:460842 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n";
  log += "dgxh100-4:460770:460842 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n";
  const auto t = env::parse_nccl_log(log);
  EXPECT_EQ(t.version, "2.19.3+cuda12.3");
  EXPECT_EQ(t.network, "IB");
  EXPECT_EQ(t.ib_devices, (std::vector<std::string>{"mlx5_10:1/RoCE", "mlx5_11:1/RoCE"}));
  EXPECT_EQ(t.net_channels, 2);
  EXPECT_EQ(t.gdr_channels, 2);
  expect_transport(t, "NET/IB", 1, "NET/IB with GPUDirect RDMA (mlx5_10:1/RoCE, mlx5_11:1/RoCE)");
}

TEST(NcclLog, SocketFallback) {
  // NVIDIA/nccl#952's node: no IB device, sockets over IPoIB (the first line verbatim), then net.cc's channels.
  const char* log =
      "<cluster_name>:924:924 [5] NCCL INFO Bootstrap : Using ibp12s0:10.149.0.32<0>\n"
      "h:924:1152 [5] NCCL INFO NET/IB : No device found.\n"
      "h:924:1152 [5] NCCL INFO NET/Socket : Using [0]ibp12s0:10.149.0.32<0>\n"
      "h:924:1152 [5] NCCL INFO Using network Socket\n"
      "h:924:1152 [5] NCCL INFO Channel 00/0 : 13[5] -> 5[5] [receive] via NET/Socket/0\n"
      "h:924:1152 [5] NCCL INFO Channel 01/0 : 5[5] -> 13[5] [send] via NET/Socket/0\n";
  const auto t = env::parse_nccl_log(log);
  EXPECT_TRUE(t.ib_no_device);
  EXPECT_EQ(t.socket_devices, (std::vector<std::string>{"ibp12s0:10.149.0.32"}));
  expect_transport(t, "NET/Socket", 0, "NET/Socket (ibp12s0:10.149.0.32)");
}

TEST(NcclLog, IbWithoutGdrAndTheReason) {
  std::string log = kIpoibLog;
  log += "master_node:20:289 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\n";
  log += "master_node:20:289 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0\n";
  log += "master_node:20:289 [0] NCCL INFO Channel 00/0 : 4[0] -> 0[0] [receive] via NET/IB/0(1)/Shared\n";
  const auto t = env::parse_nccl_log(log);
  EXPECT_EQ(t.version, "2.4.7+cuda10.0");
  EXPECT_FALSE(t.ib_disabled_by_env);  // "set by environment to 0."
  EXPECT_EQ(t.ib_devices, (std::vector<std::string>{"mlx5_0:1/IB"}));
  EXPECT_EQ(t.socket_devices, (std::vector<std::string>{"ib0:192.168.11.1"}));
  EXPECT_EQ(t.gdr_disabled, (std::vector<std::string>{"mlx5_0"}));
  expect_transport(t, "NET/IB", 0, "NET/IB without GPUDirect RDMA (mlx5_0:1/IB)");
}

TEST(NcclLog, PartialGdrAndPxnProxy) {
  const char* log =
      "a:1:2 [0] NCCL INFO Channel 02/1 : 3[3] -> 8[0] [send] via NET/IB/3(0)/GDRDMA(PCI)/Shared\n"
      "a:1:2 [0] NCCL INFO Channel 03/1 : 3[3] -> 8[0] [send] via NET/IB/3\n";
  const auto t = env::parse_nccl_log(log);
  EXPECT_EQ(t.net_channels, 2);
  EXPECT_EQ(t.gdr_channels, 1);
  EXPECT_EQ(env::transport_summary(t), "NET/IB with GPUDirect RDMA on 1 of 2 channels");
}

TEST(NcclLog, OneNodeIsP2pAndShm) {
  const char* log =
      "n:5:6 [0] NCCL INFO Using network IB\n"
      "n:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
      "n:5:6 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC\n"
      "n:5:6 [0] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct\n";
  const auto t = env::parse_nccl_log(log);
  EXPECT_EQ(t.p2p_channels, 2);
  EXPECT_EQ(t.shm_channels, 1);
  EXPECT_EQ(env::transport_kind(t), "P2P/SHM");
  EXPECT_EQ(env::transport_gdr(t), -1);
  EXPECT_NE(env::transport_summary(t).find("needs no network"), std::string::npos);
}

TEST(NcclLog, PluginNamesWithSpacesAndDisabledIb) {
  const char* log =
      "n:5:6 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
      "n:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0/GDRDMA\n"
      "n:5:6 [0] NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n";
  const auto t = env::parse_nccl_log(log);
  EXPECT_TRUE(t.ib_disabled_by_env);
  EXPECT_EQ(env::transport_kind(t), "NET/AWS Libfabric");
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_EQ(t.warnings[0], "Call to ibv_reg_mr failed with error Cannot allocate memory");
}

TEST(NcclLog, UnexpectedInputIsUnknownNeverACrash) {
  EXPECT_EQ(env::transport_kind(env::parse_nccl_log("")), "");
  EXPECT_NE(env::transport_summary(env::parse_nccl_log("")).find("unknown"), std::string::npos);
  const char* odd[] = {"NCCL INFO",
                       "NCCL INFO Channel  via ",
                       "x NCCL INFO Channel 0 via NET/",
                       "NCCL INFO NET/IB : Using [",
                       "NCCL INFO NET/IB : Using [x]y [0]",
                       "NCCL INFO GPU Direct RDMA Disabled for HCA 0 'mlx",
                       "NCCL INFO NCCL_IB_DISABLE set by environment to ",
                       "NCCL version ",
                       "\r\n\n"};
  for (const char* l : odd) {
    env::NcclTransport t;
    env::add_nccl_line(t, l);
    (void)env::transport_summary(t);
  }
  const auto t =
      env::parse_nccl_log(std::string(100000, '[') + " NCCL INFO NET/IB : Using " + std::string(100000, '['));
  EXPECT_EQ(t.nccl_lines, 1);
  const auto u = env::parse_nccl_log("NCCL INFO Channel 00 : 0[0] -> 1[0] via COLLNET/x\nNCCL INFO something new\n");
  EXPECT_EQ(u.unrecognised, 2);
  EXPECT_NE(env::transport_summary(u).find("no channel connections"), std::string::npos);
}
