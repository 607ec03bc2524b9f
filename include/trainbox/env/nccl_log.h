// trainbox/env/nccl_log.h — which transport NCCL really chose, read from its INFO lines.
//
// NCCL says it only in its debug log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET): "NET/IB :
// Using [0]mlx5_0:1/IB ...", "Using network IB", and one line per channel connection, "Channel
// 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA" (P2P/…, SHM/… inside a node). The parser is
// pure and total: any text gives a result (unknown lines are counted and skipped; nothing it
// reads can make it throw), so preflight and `bench allreduce` can describe the run or say
// they could not. NcclLogCapture turns NCCL's log on, into a file, for the process.
//
//   NcclLogCapture cap;                    // before the first NCCL communicator
//   ... the first collective ...
//   NcclTransport t = parse_nccl_log(cap.text());
//   puts(transport_summary(t).c_str());    // "NET/IB, GPUDirect RDMA (mlx5_0:1/IB mlx5_1:1/IB)"
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::env {

struct NcclTransport {
  std::string version;                      // "2.27.5+cuda12.9" ("NCCL version …")
  std::string network;                      // "Using network IB" / "Socket" / a plugin's name
  std::vector<std::string> ib_devices;      // "mlx5_0:1/IB", "mlx5_10:1/RoCE" (NET/IB : Using …)
  std::vector<std::string> socket_devices;  // "eth0:10.0.0.1" (NET/Socket : Using …)
  bool ib_no_device = false;                // "NET/IB : No device found."
  bool ib_disabled_by_env = false;          // "NCCL_IB_DISABLE set by environment to 1."
  std::vector<std::string> gdr_disabled;    // HCAs of "GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"
  std::string net_name;                     // from the channel lines: "IB", "Socket", a plugin's name
  int net_channels = 0;                     // "… via NET/<name>/<dev>…"
  int gdr_channels = 0;                     // … of which "/GDRDMA"
  int p2p_channels = 0;                     // "… via P2P/…"
  int shm_channels = 0;                     // "… via SHM/…"
  std::vector<std::string> warnings;        // "NCCL WARN" texts (the first 8)
  int nccl_lines = 0;                       // lines NCCL wrote (INFO or WARN)
  int unrecognised = 0;                     // NCCL lines this parser has no use for
};

// One line of NCCL's log ("host:pid:tid [dev] NCCL INFO …", or a bare "NCCL version …").
void add_nccl_line(NcclTransport& t, std::string_view line);
// A whole log (lines separated by '\n').
NcclTransport parse_nccl_log(std::string_view text);

// "NET/IB", "NET/Socket", "NET/<plugin>", "P2P/SHM" (no network: one node), or "" (unknown).
std::string transport_kind(const NcclTransport& t);
// NET channels use GPUDirect RDMA: 1 all or some, 0 none, -1 no NET channel seen.
int transport_gdr(const NcclTransport& t);
// One line for people: "NET/IB with GPUDirect RDMA (mlx5_0:1/IB, mlx5_1:1/IB)", "NET/Socket
// (eth0:10.0.0.1)", "P2P/SHM (one node: NCCL needs no network)", "unknown: …".
std::string transport_summary(const NcclTransport& t);

// Turns NCCL's INIT/NET debug log on for this process, into a file of its own, from
// construction (which must come before the process's first NCCL call: NCCL reads these
// variables once) until destruction, which restores the variables and deletes the file. When
// the user set NCCL_DEBUG_FILE, that file is read instead and left alone; a user's
// NCCL_DEBUG=INFO output goes to the file meanwhile. Process set-up: construct it in a
// command, not in library code that an embedding program calls.
class NcclLogCapture {
 public:
  NcclLogCapture();
  ~NcclLogCapture();
  NcclLogCapture(const NcclLogCapture&) = delete;
  NcclLogCapture& operator=(const NcclLogCapture&) = delete;
  std::string text() const;  // the log so far ("" when there is none)
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
  struct Saved {
    std::string name, value;
    bool set = false;
  };
  std::vector<Saved> saved_;
};

}  // namespace trainbox::env
