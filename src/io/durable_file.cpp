#include <trainbox/io/durable_file.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace trainbox::io {

// 1 MiB: torch's zip writer hands over 30-byte headers and whole tensors alike; this turns
// the headers into few syscalls and passes big tensors through (flushed, then written direct).
constexpr std::size_t kFileBuffer = std::size_t{1} << 20;

FileWriteError::FileWriteError(const std::string& what, int e) : SystemError(what + ": " + errno_text(e)), err(e) {}

DurableFile::DurableFile(std::string path)
    : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
  if (!fd_) throw FileWriteError("cannot create " + path_, errno);
  buf_.reserve(kFileBuffer);
}

void DurableFile::fail(const char* what, int err) noexcept {
  if (err_ == 0) {
    err_ = err;
    failed_at_ = what;
  }
}

void DurableFile::write_all(const char* p, std::size_t left) noexcept {
  while (left > 0 && err_ == 0) {
    const ssize_t n = ::write(fd_.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail("cannot write", n < 0 ? errno : ENOSPC);
    else
      p += n, left -= static_cast<std::size_t>(n);
  }
}

void DurableFile::flush() noexcept {
  write_all(buf_.data(), buf_.size());
  buf_.clear();
}

std::size_t DurableFile::write(const void* data, std::size_t n) noexcept {
  const char* p = static_cast<const char*>(data);
  for (std::size_t left = n; left > 0 && err_ == 0 && fd_;) {  // after a failure nothing more is written
    if (buf_.size() == kFileBuffer) flush();
    if (p && buf_.empty() && left >= kFileBuffer) {  // a big tensor: straight through, no copy
      write_all(p, left);
      break;
    }
    const std::size_t take = std::min(left, kFileBuffer - buf_.size());
    if (p) {
      buf_.append(p, take);
      p += take;
    } else {
      buf_.append(take, '\0');
    }
    left -= take;
  }
  return n;
}

void DurableFile::close() {
  if (!fd_) throw FileWriteError("cannot write " + path_ + " (already closed)", EBADF);
  flush();
  if (err_ == 0 && ::fsync(fd_.get()) != 0) fail("cannot sync", errno);
  if (::close(fd_.release()) != 0) fail("cannot close", errno);
  if (err_ != 0) throw FileWriteError(std::string(failed_at_) + " " + path_, err_);
}

void DurableFile::write_text(const std::string& path, const std::string& text) {
  DurableFile f(path);
  f.write(text.data(), text.size());
  f.close();
}

int sync_path(const std::string& path) noexcept {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno;
  return ::fsync(fd.get()) == 0 ? 0 : errno;
}

void fsync_path(const std::string& path) {
  if (const int err = sync_path(path)) throw SystemError("cannot sync " + path + ": " + errno_text(err));
}

}  // namespace trainbox::io
