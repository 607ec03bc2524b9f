// trainbox/train/checkpoint.h — atomic, checksummed checkpoints in <run_dir>/checkpoints/.
//
// A checkpoint is a directory step_<N>/ written in full under a temporary name: the
// caller's files, then MANIFEST.json (the size and SHA-256 of every file), then COMPLETE
// (the step and the manifest's own SHA-256); every file fsync'ed, then renamed into place.
// Only then is the `latest` pointer (a one-line file, itself replaced by rename) moved to
// it. A crash at any moment leaves `latest` naming a complete checkpoint — the previous
// one — and at worst a .tmp-* directory, cleaned up at the next start. The last `keep`
// checkpoints are kept; keep >= 2 means a checkpoint damaged after it was written (a bad
// disk, a bad copy) still leaves one to fall back to.
//
// Resuming verifies before anything is loaded: latest() returns the newest checkpoint that
// is complete and matches its manifest, falling back past damaged ones and saying so;
// check_resumable() is the same test for a directory the user names. Checkpoints written
// before manifests existed (COMPLETE holds only the step) are accepted, with a note that
// they were not verified. Files the manifest does not list are ignored (nothing reads them).
//
// Why SHA-256 from OpenSSL's libcrypto: crc32c would be faster, but Debian 12 packages no
// crc32c library (libcrc32c-dev arrives in Debian 13), while libcrypto is on every Linux
// machine and uses the CPU's SHA extensions: ~1.5 GB/s on one core of the build VM
// (`openssl speed -evp sha256`), i.e. verifying a 2 GB checkpoint costs about as much as
// reading it from a fast disk. Files are hashed in 1 MiB pieces, never read whole.
//
// Threading: one CheckpointStore per process; only one process (rank 0) saves. Every rank
// may call latest() at start-up: it only reads, and all ranks reach the same answer.
//
//   CheckpointStore store(run_dir, /*keep=*/3);
//   store.save(step, [&](const std::string& dir) { torch::save(model, dir + "/model.pt"); });
//   std::vector<std::string> notes;
//   if (auto dir = store.latest(&notes)) { for (auto& n : notes) log(n); resume_from(*dir); }
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <trainbox/util/errors.h>

namespace trainbox::train {

// One thing wrong with one file of a checkpoint.
struct CheckpointProblem {
  std::string file;    // relative to the checkpoint dir: "model.pt", "MANIFEST.json"
  std::string detail;  // "missing", "1024 bytes, the manifest says 4096 (truncated)", "contents changed: …"
  std::string message() const { return file + ": " + detail; }
};

class CheckpointStore {
 public:
  CheckpointStore(std::string run_dir, std::int64_t keep);

  // Writes checkpoint step_<step>: `write_files` fills the (temporary) directory it is given;
  // save() adds the manifest and the COMPLETE marker. Returns the final directory.
  // Any failure — the caller's writes, a full disk, an fsync or rename error — throws
  // SystemError "checkpoint save failed: No space left on device (…)" (exit code 1) after
  // removing everything this save wrote: `latest` and the checkpoints it names are untouched.
  // `before_commit`, if given, runs between the written, fsync'ed files and the renames that
  // commit them (the trainer's fault injection: a crash at the worst moment).
  std::string save(std::int64_t step, const std::function<void(const std::string& dir)>& write_files,
                   const std::function<void()>& before_commit = {});

  // For --resume auto: the checkpoint to resume from, or nullopt when the run has none.
  // That is the one `latest` names if it is complete and verifies; otherwise the newest
  // step_N that does, with a line in `notes` for each checkpoint passed over (naming the
  // file and what is wrong) and one for the fallback. Also notes a pre-manifest checkpoint.
  // Throws DataError (exit 2) naming every bad file when checkpoints exist but none is
  // usable: garbage is never loaded. Reads (hashes) the checkpoint's files.
  std::optional<std::string> latest(std::vector<std::string>* notes = nullptr) const;
  // Whether the run dir holds any checkpoint (or a `latest` pointer), usable or not. Cheap:
  // for refusing to start a fresh run over an old one.
  bool has_checkpoints() const;
  const std::string& dir() const { return dir_; }
  // Removes leftovers of interrupted saves (.tmp-* directories); puts back a checkpoint
  // that a save replacing the same step had moved aside when it was interrupted.
  void clean_incomplete() const;

  // Every problem with checkpoint `checkpoint_dir` against its manifest: files missing,
  // truncated or changed, a damaged manifest or COMPLETE marker. Empty = verified (or a
  // pre-manifest checkpoint: see has_manifest). Does not check that COMPLETE exists.
  static std::vector<CheckpointProblem> verify(const std::string& checkpoint_dir);
  // For --resume DIR: throws DataError (exit 2) when the directory is missing, incomplete
  // or fails verify(), naming the files; returns notes (a pre-manifest checkpoint's).
  static std::vector<std::string> check_resumable(const std::string& checkpoint_dir);
  static bool has_manifest(const std::string& checkpoint_dir);

  // fsync a file or directory by path (throws SystemError).
  static void fsync_path(const std::string& path);

 private:
  std::string dir_;
  std::int64_t keep_;
};

// A failed write of a checkpoint file, with its errno (ENOSPC, EDQUOT, EIO …) for the
// "checkpoint save failed: No space left on device" message.
struct FileWriteError : SystemError {
  FileWriteError(const std::string& what, int err);
  int err;
};

// A checkpoint file written through a callback that must not fail midway. LibTorch's archive
// writer does not survive a failing sink: on a full disk, OutputArchive::save_to(path) fails a
// write, then throws again from the writer's destructor while unwinding — std::terminate,
// SIGABRT, no message (LibTorch 2.11, found by tests/integration/checkpoint_enospc.sh). So
// write() always takes the bytes (buffered, 1 MiB), keeps the first error and stops writing;
// close() fsyncs and throws that error. Move-less, single-threaded; the destructor never throws.
//   CheckpointFile f(dir + "/model.pt");
//   archive.save_to([&](const void* p, std::size_t n) { return f.write(p, n); });
//   f.close();   // FileWriteError: "cannot write …/model.pt: No space left on device (errno 28)"
class CheckpointFile {
 public:
  explicit CheckpointFile(std::string path);  // creates/truncates; throws FileWriteError
  ~CheckpointFile();
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;
  // Always returns n (so the caller's writer carries on); data == nullptr writes n zero bytes.
  std::size_t write(const void* data, std::size_t n) noexcept;
  // Flushes, fsyncs and closes; throws FileWriteError with the first error of any write.
  void close();
  // A whole small file (state.json, config.toml), checked the same way.
  static void write_text(const std::string& path, const std::string& text);

 private:
  void flush() noexcept;
  void write_all(const char* p, std::size_t n) noexcept;
  void fail(const char* what, int err) noexcept;
  std::string path_;
  int fd_ = -1;
  int err_ = 0;
  const char* failed_at_ = nullptr;
  std::string buf_;
};

// Marker file a complete checkpoint always has (written last, before the rename). Its first
// line is the step; its second, "MANIFEST.json sha256 <hex>", the manifest's checksum.
inline constexpr const char* kCheckpointComplete = "COMPLETE";
// The manifest: {"format": "trainbox-checkpoint", "version": 1, "step": N,
// "files": [{"path": "model.pt", "bytes": 1234, "sha256": "<64 hex>"}, …]}.
inline constexpr const char* kCheckpointManifest = "MANIFEST.json";

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
