// trainbox/io/durable_file.h — a file written through a callback that must not fail midway,
// made durable (fsync) when closed; and fsync of any path.
//
// LibTorch's archive writer does not survive a failing sink: on a full disk,
// OutputArchive::save_to(path) fails a write, then throws again from the writer's destructor
// while unwinding — std::terminate, SIGABRT, no message (LibTorch 2.11, found by
// tests/integration/checkpoint_enospc.sh). So write() always takes the bytes (buffered,
// 1 MiB), keeps the first error and stops writing; close() fsyncs and throws that error.
// Checkpoint files are written with it directly (they are renamed as a whole directory);
// io::AtomicFile adds the temporary name and the rename for single files. Move-less,
// single-threaded; the destructor never throws.
//
//   io::DurableFile f(dir + "/model.pt");
//   archive.save_to([&](const void* p, std::size_t n) { return f.write(p, n); });
//   f.close();   // FileWriteError: "cannot write …/model.pt: No space left on device (errno 28)"
#pragma once
#include <cstddef>
#include <string>

#include <trainbox/util/errors.h>
#include <trainbox/util/unique_fd.h>

namespace trainbox::io {

// A failed write of a file, with its errno (ENOSPC, EDQUOT, EIO …): a checkpoint save turns
// it into "checkpoint save failed: No space left on device".
struct FileWriteError : SystemError {
  FileWriteError(const std::string& what, int err);
  int err;
};

class DurableFile {
 public:
  explicit DurableFile(std::string path);  // creates/truncates; throws FileWriteError
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;
  // Always returns n (so the caller's writer carries on); data == nullptr writes n zero bytes.
  std::size_t write(const void* data, std::size_t n) noexcept;
  // errno of the first failed write so far (0 = none); buffered bytes are written later.
  int error() const noexcept { return err_; }
  // Flushes, fsyncs and closes; throws FileWriteError with the first error of any write.
  void close();
  const std::string& path() const { return path_; }
  // A whole small file (state.json, config.toml), checked the same way.
  static void write_text(const std::string& path, const std::string& text);

 private:
  void flush() noexcept;
  void write_all(const char* p, std::size_t n) noexcept;
  void fail(const char* what, int err) noexcept;
  std::string path_;
  UniqueFd fd_;
  int err_ = 0;
  const char* failed_at_ = nullptr;
  std::string buf_;
};

// fsync a file or a directory (its entries: a rename is durable only once its directory is
// synced) by path. sync_path returns 0 or the errno of the failed open or fsync;
// fsync_path throws SystemError "cannot sync <path>: <why>".
int sync_path(const std::string& path) noexcept;
void fsync_path(const std::string& path);

}  // namespace trainbox::io
