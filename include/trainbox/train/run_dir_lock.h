// trainbox/train/run_dir_lock.h — one writer per run dir.
//
// An advisory lock (flock) on <run_dir>/.lock for the life of the object. The kernel releases
// it when the holder dies, so a SIGKILLed or power-cut run never leaves a stale lock. The file
// names the holder ("pid on host h") for the refusal's message. The ranks of one data-parallel
// job share a run dir legitimately: only rank 0 takes the lock. Not movable; the destructor
// (closing the file releases the lock) never throws.
//
//   RunDirLock lock(run_dir);  // UsageError: "run dir runs/x is in use by another trainbox train (pid 42 on host n1)"
#pragma once
#include <string>

#include <trainbox/util/unique_fd.h>

namespace trainbox::train {

class RunDirLock {
 public:
  explicit RunDirLock(const std::string& run_dir);
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  UniqueFd fd_;  // the file stays after close (a later run reuses it)
};

}  // namespace trainbox::train
