#include <trainbox/io/made_dirs.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/unique_fd.h>

namespace trainbox::io {
namespace fs = std::filesystem;

namespace {
// What identifies a folder: device, inode, birth time. `fd` and `path` as statx takes them (a
// path relative to fd; "" with AT_EMPTY_PATH: fd itself). Links are never followed.
std::optional<MadeDirs::Made> identity(int fd, const char* path, int flags) {
  struct statx sx {};
  if (::statx(fd, path, flags | AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_INO | STATX_BTIME, &sx) != 0)
    return std::nullopt;
  if (!S_ISDIR(sx.stx_mode)) return std::nullopt;
  MadeDirs::Made m;
  m.dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  m.ino = sx.stx_ino;
  if (sx.stx_mask & STATX_BTIME) m.birth_ns = std::int64_t(sx.stx_btime.tv_sec) * 1000000000 + sx.stx_btime.tv_nsec;
  return m;
}
}  // namespace

std::string resolved_path(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path.empty() ? "." : path, ec);
  if (ec) p = fs::path(path);
  fs::path r = fs::weakly_canonical(p, ec);
  if (ec) r = p;
  r = r.lexically_normal();
  if (!r.has_filename() && r.has_parent_path() && r != r.root_path()) r = r.parent_path();  // "a/b/" -> "a/b"
  return r.string();
}

void MadeDirs::create(const std::string& dir) {
  const fs::path target = resolved_path(dir);
  fs::path cur;
  for (const auto& part : target) {
    cur /= part;
    if (part == cur.root_path() || part.empty()) continue;
    struct stat st {};
    if (::stat(cur.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        throw SystemError(fmt::format("cannot create {}: {} is not a folder", dir, cur.string()));
      continue;
    }
    if (errno != ENOENT)
      throw SystemError(fmt::format("cannot create {}: {}: {}", dir, cur.string(), errno_text(errno)));
    if (::mkdir(cur.c_str(), 0777) != 0) {
      if (errno == EEXIST) continue;  // made meanwhile by another process (another rank): not ours
      throw SystemError(fmt::format("cannot create {}: {}: {}", dir, cur.string(), errno_text(errno)));
    }
    if (auto m = identity(AT_FDCWD, cur.c_str(), 0)) {
      m->path = cur.string();
      made_.push_back(*m);
    }
  }
}

namespace {

bool is_own(const std::string& name, const std::vector<std::string>& own_files) {
  for (const auto& o : own_files) {
    if (!o.empty() && o.back() == '*') {
      if (name.compare(0, o.size() - 1, o, 0, o.size() - 1) == 0) return true;
    } else if (name == o) {
      return true;
    }
  }
  return false;
}

// Unlinks the caller's own regular files in the folder `fd` is open on (never a folder, never a
// link's target: unlinkat removes a link itself, and only regular files are taken).
void unlink_own_files(int fd, const std::vector<std::string>& own_files) {
  const int dup_fd = ::dup(fd);
  if (dup_fd < 0) return;
  DIR* d = ::fdopendir(dup_fd);
  if (!d) {
    ::close(dup_fd);
    return;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != ".." && is_own(name, own_files)) names.push_back(name);
  }
  ::closedir(d);
  for (const auto& name : names) {
    struct stat st {};
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      ::unlinkat(fd, name.c_str(), 0);
  }
}

}  // namespace

bool MadeDirs::intact() const {
  for (const auto& m : made_) {
    const auto now = identity(AT_FDCWD, m.path.c_str(), 0);
    if (!now || !(*now == m)) return false;
  }
  return true;
}

std::vector<std::string> MadeDirs::remove(const std::vector<std::string>& own_files) noexcept {
  std::vector<std::string> removed;
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    // The folder itself, never through a link, and only the one this process made.
    UniqueFd fd(::open(it->path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    const auto now = fd ? identity(fd.get(), "", AT_EMPTY_PATH) : std::nullopt;
    if (!now || !(*now == *it)) break;
    unlink_own_files(fd.get(), own_files);
    // rmdir refuses a folder that still holds anything: what is not ours stays, and so do its parents.
    const auto again = identity(AT_FDCWD, it->path.c_str(), 0);
    if (!again || !(*again == *it) || ::rmdir(it->path.c_str()) != 0) break;
    removed.push_back(it->path);
  }
  made_.clear();
  return removed;
}

}  // namespace trainbox::io
