#include <trainbox/train/checkpoint.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {
namespace fs = std::filesystem;

namespace {
void write_small_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw SystemError("cannot write " + path + ": " + errno_text(errno));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok) throw SystemError("cannot write " + path + ": " + errno_text(err));
}

// Test-only fault injection: TRAINBOX_FAULT=checkpoint_commit[:N] makes the Nth save (default
// the first) die after its files are written but before the rename, as a crash or kill -9
// would. Only on a launcher's first attempt, so a restarted job can complete.
void maybe_fault(const char* where) {
  static int calls = 0;
  ++calls;
  const char* f = std::getenv("TRAINBOX_FAULT");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (!f || (restart && std::atoi(restart) > 0)) return;
  std::string spec = f, name = spec.substr(0, spec.find(':'));
  int nth = spec.find(':') == std::string::npos ? 1 : std::atoi(spec.c_str() + spec.find(':') + 1);
  if (name == where && calls == nth) {
    std::fprintf(stderr, "trainbox: TRAINBOX_FAULT=%s: exiting abruptly\n", f);
    std::_Exit(86);
  }
}
}  // namespace

CheckpointStore::CheckpointStore(std::string run_dir, std::int64_t keep)
    : dir_(std::move(run_dir) + "/checkpoints"), keep_(std::max<std::int64_t>(1, keep)) {}

void CheckpointStore::fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw SystemError("cannot open " + path + " to sync it: " + errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw SystemError("fsync " + path + ": " + errno_text(err));
}

void CheckpointStore::clean_incomplete() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (starts_with(e.path().filename().string(), ".tmp-")) fs::remove_all(e.path(), ec);
}

std::string CheckpointStore::save(std::int64_t step, const std::function<void(const std::string&)>& write_files) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw SystemError("cannot create " + dir_ + ": " + ec.message());
  const std::string name = fmt::format("step_{}", step);
  const std::string tmp = fmt::format("{}/.tmp-{}-{}", dir_, name, ::getpid()), final_dir = dir_ + "/" + name;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw SystemError("cannot create " + tmp + ": " + ec.message());
  try {
    write_files(tmp);
    write_small_file(tmp + "/" + kCheckpointComplete, fmt::format("{}\n", step));
    for (const auto& e : fs::directory_iterator(tmp)) fsync_path(e.path().string());
    fsync_path(tmp);
    maybe_fault("checkpoint_commit");
    // Re-saving a step (after a resume): move the old copy aside rather than deleting it
    // first, so `latest` never names a missing directory; it goes once the new one is in.
    const std::string old = fmt::format("{}/.tmp-old-{}-{}", dir_, name, ::getpid());
    const bool had_old = fs::exists(final_dir);
    if (had_old) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fsync_path(dir_);
    if (had_old) fs::remove_all(old);
    // --- move `latest` only now: it never names an incomplete checkpoint ---
    write_small_file(dir_ + "/latest.tmp", name + "\n");
    fs::rename(dir_ + "/latest.tmp", dir_ + "/latest");
    fsync_path(dir_);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw SystemError(std::string("checkpoint ") + name + ": " + e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  // --- prune: keep the newest `keep_` ---
  std::vector<std::pair<std::int64_t, fs::path>> all;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    auto n = e.path().filename().string();
    if (starts_with(n, "step_") && e.is_directory()) {
      auto v = parse_version(n.substr(5));
      if (v.size() == 1) all.emplace_back(v[0], e.path());
    }
  }
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i + keep_ < all.size(); ++i)
    if (all[i].second != fs::path(final_dir)) fs::remove_all(all[i].second, ec);
  return final_dir;
}

std::optional<std::string> CheckpointStore::latest() const {
  auto text = read_file(dir_ + "/latest");
  if (!text) return std::nullopt;
  std::string dir = dir_ + "/" + trim(*text);
  if (!fs::exists(dir + "/" + kCheckpointComplete)) return std::nullopt;
  return dir;
}

RunDirLock::RunDirLock(const std::string& run_dir) {
  const std::string path = run_dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw UsageError("cannot create " + path + ": " + errno_text(errno), "pass a run dir you can write");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder = trim(read_file(path).value_or(""));
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw SystemError("cannot lock " + path + ": " + errno_text(err));
    throw UsageError(fmt::format("run dir {} is in use by another trainbox train ({})", run_dir,
                                 holder.empty() ? std::string("holder unknown") : "pid " + holder),
                     "wait for that run to finish, stop it, or pass another --run-dir");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = fmt::format("{} on host {}\n", ::getpid(), host);
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, me.data(), me.size(), 0);
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock; the file stays (a later run reuses it)
}

}  // namespace trainbox::train
