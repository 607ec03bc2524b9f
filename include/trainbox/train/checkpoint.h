// trainbox/train/checkpoint.h — atomic checkpoints in <run_dir>/checkpoints/.
//
// A checkpoint is a directory step_<N>/ written in full under a temporary name, every
// file fsync'ed, then renamed into place; only then is the `latest` pointer (a one-line
// file, itself replaced by rename) moved to it. A crash at any moment leaves `latest`
// naming a complete checkpoint — the previous one — and at worst a .tmp-* directory,
// removed at the next start. The last `keep` checkpoints are kept.
//
//   CheckpointStore store(run_dir, /*keep=*/3);
//   store.save(step, [&](const std::string& dir) { torch::save(model, dir + "/model.pt"); });
//   if (auto dir = store.latest()) resume_from(*dir);
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace trainbox::train {

class CheckpointStore {
 public:
  CheckpointStore(std::string run_dir, std::int64_t keep);

  // Writes checkpoint step_<step>: `write_files` fills the (temporary) directory it is given.
  // Returns the final directory. Throws SystemError; `latest` is untouched on failure.
  std::string save(std::int64_t step, const std::function<void(const std::string& dir)>& write_files);
  // The checkpoint `latest` names, if it exists and is complete.
  std::optional<std::string> latest() const;
  const std::string& dir() const { return dir_; }
  // Removes leftovers of interrupted saves (.tmp-* directories).
  void clean_incomplete() const;

  // fsync a file or directory by path (throws SystemError).
  static void fsync_path(const std::string& path);

 private:
  std::string dir_;
  std::int64_t keep_;
};

// Marker file a complete checkpoint always has (written last, before the rename).
inline constexpr const char* kCheckpointComplete = "COMPLETE";

// One writer per run dir: an advisory lock (flock) on <run_dir>/.lock for the life of the
// object. The kernel releases it when the holder dies, so a SIGKILLed or power-cut run never
// leaves a stale lock. The file names the holder ("pid host") for the refusal's message. The
// ranks of one data-parallel job share a run dir legitimately: only rank 0 takes the lock.
//   RunDirLock lock(run_dir);   // throws UsageError: "run dir runs/x is in use by pid 4242 on host n1 …"
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace trainbox::train
