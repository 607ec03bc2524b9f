#include <trainbox/io/atomic_file.h>

#include <fcntl.h>
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
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail();
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    written_ += static_cast<std::uint64_t>(w);
  }
}

// fsync, close, rename over the target, fsync the directory so the rename itself is durable.
void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail();
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail();
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail();
  committed_ = true;
  std::string dir = std::filesystem::path(target_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail();
  // EINVAL: the file system cannot sync directories (some FUSE mounts); the data is synced.
  const bool ok = ::fsync(dfd) == 0 || errno == EINVAL;
  const int err = errno;
  ::close(dfd);
  errno = err;
  if (!ok) fail();
}

void AtomicFile::fail() const {
  throw SystemError(fmt::format("cannot write {} {} (via {}): {}", what_, target_, tmp_, errno_text(errno)));
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

}  // namespace trainbox::io
