#include <trainbox/io/made_dirs.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/unique_fd.h>

namespace trainbox::io {
namespace fs = std::filesystem;

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
    if (errno != ENOENT) throw SystemError(fmt::format("cannot create {}: {}: {}", dir, cur.string(), errno_text(errno)));
    if (::mkdir(cur.c_str(), 0777) != 0) {
      if (errno == EEXIST) continue;  // made meanwhile by another process (another rank): not ours
      throw SystemError(fmt::format("cannot create {}: {}: {}", dir, cur.string(), errno_text(errno)));
    }
    if (::lstat(cur.c_str(), &st) == 0) made_.push_back({cur.string(), st.st_dev, st.st_ino});
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

std::vector<std::string> MadeDirs::remove(const std::vector<std::string>& own_files) noexcept {
  std::vector<std::string> removed;
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    // The folder itself, never through a link, and only the inode this process made.
    UniqueFd fd(::open(it->path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || st.st_dev != it->dev || st.st_ino != it->ino) break;
    unlink_own_files(fd.get(), own_files);
    // rmdir refuses a folder that still holds anything: what is not ours stays, and so do its parents.
    struct stat again {};
    if (::lstat(it->path.c_str(), &again) != 0 || !S_ISDIR(again.st_mode) || again.st_dev != it->dev ||
        again.st_ino != it->ino || ::rmdir(it->path.c_str()) != 0)
      break;
    removed.push_back(it->path);
  }
  made_.clear();
  return removed;
}

}  // namespace trainbox::io
