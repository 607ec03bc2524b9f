// Shared by the libFuzzer harnesses (tests/fuzz/README.md): the input as a file, for parsers
// that take a path, and the rule every harness follows — a parser may reject its input only
// with trainbox::Error (DataError, UsageError, …); any other exception, a crash, a leak or
// undefined behaviour is a finding.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace trainbox::fuzz {

// One in-memory file per process (memfd), rewritten for each input; `path` opens it.
class InputFile {
 public:
  InputFile() : fd_(::memfd_create("trainbox-fuzz", 0)), path_("/proc/self/fd/" + std::to_string(fd_)) {
    if (fd_ < 0) std::abort();
  }
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size)))
      std::abort();
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// A property the harness checks beyond "no crash": fails loudly, as a crash, with a reason.
#define FUZZ_CHECK(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "fuzz property violated: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

}  // namespace trainbox::fuzz
