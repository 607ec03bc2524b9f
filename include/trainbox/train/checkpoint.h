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
// The pieces: the caller writes each file through io::DurableFile (io/durable_file.h: a full
// disk is reported, not an abort), digests come from io/sha256.h, and one writer per run dir
// is train/run_dir_lock.h.
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

  // --- sharded saves (dist.zero_stage > 0; docs/distributed.md, "Sharded checkpoints") ---
  // Every rank writes its shard into one staging directory, so the run dir must be on a file
  // system every rank sees. Rank 0 calls begin_staged() (empties and creates it), then after a
  // collective that says every rank's shard is written and fsync'ed, save_staged(): its own
  // files, then the manifest — every file's SHA-256 plus `sharding_json` (the flat layout) under
  // "sharding" — then the same renames and `latest` as save(). On any failure rank 0 calls
  // abandon_staged(). A crash at any moment leaves `latest` at the previous checkpoint.
  std::string staging_dir(std::int64_t step) const;
  void begin_staged(std::int64_t step) const;
  std::string save_staged(std::int64_t step, const std::function<void(const std::string& dir)>& write_files,
                          const std::function<void()>& before_commit, const std::string& sharding_json);
  void abandon_staged(std::int64_t step) const;

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

 private:
  std::string save_in(std::int64_t step, const std::string& tmp, bool fresh,
                      const std::function<void(const std::string& dir)>& write_files,
                      const std::function<void()>& before_commit, const std::string& sharding_json);
  std::string dir_;
  std::int64_t keep_;
};

// Marker file a complete checkpoint always has (written last, before the rename). Its first
// line is the step; its second, "MANIFEST.json sha256 <hex>", the manifest's checksum.
inline constexpr const char* kCheckpointComplete = "COMPLETE";
// The manifest: {"format": "trainbox-checkpoint", "version": 1, "step": N,
// "files": [{"path": "model.pt", "bytes": 1234, "sha256": "<64 hex>"}, …]}; a sharded checkpoint's
// also has "sharding" (the flat layout; verify() checks its rank_<r>.json files against it).
inline constexpr const char* kCheckpointManifest = "MANIFEST.json";

}  // namespace trainbox::train
