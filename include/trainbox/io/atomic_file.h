// trainbox/io/atomic_file.h — a file that appears complete or not at all (exports, safetensors).
//
// Contract: the constructor creates `<path>.tmp.<pid>` in path's folder (so the final rename
// never crosses a file system); write() appends (through io::DurableFile, buffered: a failed
// write throws at a later write() or at commit()); commit() fsyncs, closes, renames over
// `path` and fsyncs the folder, so `path` holds either its old contents or the whole new
// file. The destructor removes the temp file unless commit() succeeded. Every failure throws
// SystemError naming `what`, the path, the temp file and errno. Not movable; not thread-safe.
//
//   trainbox::io::AtomicFile f("model.onnx", "ONNX file");
//   f.write(bytes.data(), bytes.size());
//   f.commit();                                  // throws SystemError: "cannot write ONNX file …"
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <trainbox/io/durable_file.h>

namespace trainbox::io {

class AtomicFile {
 public:
  AtomicFile(std::string path, std::string what);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, std::size_t n);
  std::uint64_t size() const { return written_; }  // bytes written so far
  void commit();
  const std::string& path() const { return target_; }

 private:
  [[noreturn]] void fail(int err) const;

  std::string target_, tmp_, what_;
  std::optional<DurableFile> file_;  // empty once committed
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

// Whether `path` can be created by an AtomicFile: its folder exists, is a folder and is
// writable, and `path` itself is not a folder. Returns "" when it can, else why not (for a
// UsageError that names the path). Exports check this before any work.
std::string why_not_writable(const std::string& path);

// The check a command makes of an output before any work (trainbox export, trainbox data pack),
// in this order: `path` is a folder (said at once: --force would not help); `path` exists and
// !force ("pass --force to replace it"); why_not_writable (a missing folder is refused, not
// created). Throws UsageError (exit 2) naming `path`; returns when an AtomicFile may write it.
void check_output_path(const std::string& path, bool force);

}  // namespace trainbox::io
