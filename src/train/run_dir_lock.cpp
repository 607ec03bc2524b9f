#include <trainbox/train/run_dir_lock.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {

RunDirLock::RunDirLock(const std::string& run_dir) {
  const std::string path = run_dir + "/.lock";
  fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) throw UsageError("cannot create " + path + ": " + errno_text(errno), "pass a run dir you can write");
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = trim(read_file(path).value_or(""));
    fd_.reset();
    if (err != EWOULDBLOCK) throw SystemError("cannot lock " + path + ": " + errno_text(err));
    throw UsageError(fmt::format("run dir {} is in use by another trainbox train ({})", run_dir,
                                 holder.empty() ? std::string("holder unknown") : "pid " + holder),
                     "wait for that run to finish, stop it, or pass another --run-dir");
  }
  const std::string me = fmt::format("{} on host {}\n", ::getpid(), host_name());
  if (::ftruncate(fd_.get(), 0) == 0) (void)!::pwrite(fd_.get(), me.data(), me.size(), 0);
}

}  // namespace trainbox::train
