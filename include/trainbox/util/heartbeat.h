// trainbox/util/heartbeat.h — a worker's progress, for the launcher's stall detection.
//
// The contract (launcher-independent; docs/distributed.md, "Hangs"):
//   - The launcher sets TRAINBOX_HEARTBEAT_FILE=<path> for each worker (trainbox run:
//     <log_dir>/attempt_<n>/<rank>/heartbeat). Unset: nobody listens; beats cost nothing.
//   - The worker makes the file kHeartbeatBytes (64) long and maps it shared; a beat writes one
//     line into the mapping: "<step> <phase> <unix_ms>", padded with spaces, ending in '\n'.
//     A memory store, no system call: cheap enough for every phase of every step.
//   - step: optimizer steps done; phase: a word ([a-z_]+). trainbox train reports rendezvous
//     (its process group forming), data, forward_backward, allreduce (waiting for the other
//     ranks), optimizer, checkpoint, eval, done. "allreduce", "barrier" and "rendezvous" mean
//     "waiting for other ranks".
//   - The launcher reads the file; a record that changed is progress. A worker whose file
//     never gets a record is judged by the kernel's view alone (stopped or in D for the whole
//     stall timeout), or as a start-up stall when other ranks do write records (launch/stall.h).
// A Python worker does the same with the standard library (docs/distributed.md):
//   fd = os.open(os.environ["TRAINBOX_HEARTBEAT_FILE"], os.O_RDWR | os.O_CREAT); os.ftruncate(fd, 64)
//   hb = mmap.mmap(fd, 64); hb[:64] = f"{step} {phase} {time.time_ns() // 10**6}".ljust(63).encode() + b"\n"
//
// Thread-safe enough for its purpose (a torn record is a transient the reader skips).
//   trainbox::heartbeat().beat(step, "data");      // the process-wide one, from the environment
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trainbox {

inline constexpr const char* kHeartbeatEnv = "TRAINBOX_HEARTBEAT_FILE";
inline constexpr std::size_t kHeartbeatBytes = 64;

class Heartbeat {
 public:
  Heartbeat() = default;                        // off: beats do nothing
  explicit Heartbeat(const std::string& path);  // maps the file; off (with no error) if it cannot
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  bool active() const { return map_ != nullptr; }
  void beat(std::int64_t step, std::string_view phase);
  void phase(std::string_view phase) { beat(step_, phase); }  // same step, a new phase
  std::int64_t step() const { return step_; }

 private:
  char* map_ = nullptr;
  std::int64_t step_ = 0;
};

// The process's heartbeat, opened from TRAINBOX_HEARTBEAT_FILE on first use.
Heartbeat& heartbeat();

struct HeartbeatRecord {
  std::int64_t step = 0;
  std::string phase;
  std::int64_t unix_ms = 0;
};
// Parses a record as written by beat(); nullopt for an empty, torn or foreign one.
std::optional<HeartbeatRecord> parse_heartbeat(std::string_view text);

}  // namespace trainbox
