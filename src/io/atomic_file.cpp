#include <trainbox/io/atomic_file.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::io {

AtomicFile::AtomicFile(std::string path, std::string what)
    : target_(std::move(path)), tmp_(fmt::format("{}.tmp.{}", target_, ::getpid())), what_(std::move(what)) {
  try {
    file_.emplace(tmp_);
  } catch (const FileWriteError& e) {
    fail(e.err);
  }
}

AtomicFile::~AtomicFile() {
  file_.reset();  // closes without syncing: the file is thrown away
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (!file_) fail(EBADF);  // after commit()
  file_->write(data, n);
  written_ += n;
  if (const int err = file_->error()) fail(err);
}

// fsync, close, rename over the target, fsync the directory so the rename itself is durable.
void AtomicFile::commit() {
  if (!file_) fail(EBADF);
  try {
    file_->close();
  } catch (const FileWriteError& e) {
    fail(e.err);
  }
  file_.reset();
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail(errno);
  committed_ = true;
  std::string dir = std::filesystem::path(target_).parent_path().string();
  if (dir.empty()) dir = ".";
  // EINVAL: the file system cannot sync directories (some FUSE mounts); the data is synced.
  if (const int err = sync_path(dir); err != 0 && err != EINVAL) fail(err);
}

void AtomicFile::fail(int err) const {
  throw SystemError(fmt::format("cannot write {} {} (via {}): {}", what_, target_, tmp_, errno_text(err)));
}

std::string why_not_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return "the path is empty";
  if (fs::is_directory(path, ec)) return "it is a folder";
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("its folder {} cannot be used: {}", dir, errno_text(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a folder", dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return fmt::format("its folder {} is not writable: {}", dir, errno_text(errno));
  return {};
}

void check_output_path(const std::string& path, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!path.empty() && fs::is_directory(path, ec))
    throw UsageError(fmt::format("cannot write {}: it is a folder", path),
                     fmt::format("name a file, not a folder (e.g. {}/NAME)", path));
  if (!force && fs::exists(fs::symlink_status(path, ec)))
    throw UsageError(fmt::format("{} already exists", path), "pass --force to replace it, or choose another name");
  if (std::string why = why_not_writable(path); !why.empty())
    throw UsageError(
        fmt::format("cannot write {}: {}", path, why),
        "choose a path in an existing, writable folder (create the folder first: nothing is made for you)");
}

}  // namespace trainbox::io
