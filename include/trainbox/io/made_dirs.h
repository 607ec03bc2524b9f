// trainbox/io/made_dirs.h — the folders this process made, and the only ones it takes away again.
//
// The rule (docs/decisions.md, "What trainbox deletes, and why that is safe"): trainbox never
// removes a path it did not create in this process. create() makes a folder and its missing
// parents one component at a time and records each one it made by device, inode and birth time
// (statx; a removed folder's inode number is soon reused, its birth time is not). remove() takes
// them away again, deepest first, each only when
//   - it is still that folder (not a symbolic link, not replaced since: same device, inode and
//     birth time where the file system records one),
//   - after unlinking the regular files in it whose names the caller names as its own
//     (a name, or a prefix ending in '*': "events.out.tfevents.*"), nothing else is left in it
//     (rmdir, never a recursive delete).
// A folder that existed before, or that holds anything else, stays. The path is resolved as the
// kernel would resolve it (symbolic links and ".." of the part that exists) before anything is
// made, so a later removal never walks ".." or follows a link to somewhere else.
// Not thread-safe; remove() never throws.
//
//   trainbox::io::MadeDirs made;
//   made.create("runs/exp2");                    // made runs/ and runs/exp2 (both were missing)
//   ...                                          // a failure before anything worth keeping
//   made.remove({".lock", "config.toml"});       // runs/exp2, then runs/, each if it holds nothing else
#pragma once
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace trainbox::io {

class MadeDirs {
 public:
  struct Made {
    std::string path;  // absolute, resolved
    dev_t dev = 0;
    ino_t ino = 0;
    std::int64_t birth_ns = -1;  // -1: the file system records no birth time
    bool operator==(const Made& o) const { return dev == o.dev && ino == o.ino && birth_ns == o.birth_ns; }
  };
  // Creates `dir` and any missing parents (mode 0777 less the umask). Throws SystemError naming
  // the component that could not be made; what it made before that stays recorded.
  void create(const std::string& dir);
  // Removes what create() made, deepest first, as the header says; returns the paths removed.
  std::vector<std::string> remove(const std::vector<std::string>& own_files) noexcept;
  // Whether every folder create() made is still that folder (for a caller that removes what it
  // wrote inside them by other means: a tree of its own run dirs).
  bool intact() const;
  const std::vector<Made>& made() const { return made_; }
  bool made_any() const { return !made_.empty(); }

 private:
  std::vector<Made> made_;  // in creation order: parents first
};

// The path as the kernel resolves it: absolute, symbolic links and ".." resolved in the part
// that exists, the rest made lexically normal. No trailing slash.
std::string resolved_path(const std::string& path);

}  // namespace trainbox::io
