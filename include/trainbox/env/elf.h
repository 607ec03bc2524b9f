// trainbox/env/elf.h — facts read straight from shared-library files, without loading them.
//
// Reading libtorch_cuda.so as a file (mmap, headers only) takes milliseconds and works
// when the library cannot be loaded at all — the case where a user most needs to know
// which GPU architectures it was built for.
//
//   ElfFile f = ElfFile::open("/…/torch/lib/libtorch_cuda.so");    // throws SystemError
//   std::vector<std::string> archs = f.cuda_arch_list();           // {"sm_80", …, "compute_120"}
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::env {

class ElfFile {
 public:
  static ElfFile open(const std::string& path);  // throws SystemError / DataError
  ElfFile(ElfFile&&) noexcept;
  ElfFile& operator=(ElfFile&&) = delete;
  ElfFile(const ElfFile&) = delete;
  ~ElfFile();

  // Contents of a section by name ("" view if absent).
  std::string_view section(std::string_view name) const;

  // Device code embedded in the .nv_fatbin section: SASS as "sm_XY", PTX as
  // "compute_XY"; all SASS (by arch) then all PTX (by arch). See fatbin_arch_list.
  std::vector<std::string> cuda_arch_list(double min_share = 0.5) const;

  // DT_RUNPATH (or DT_RPATH) entries with $ORIGIN replaced by the file's directory.
  std::vector<std::string> runpath() const;

  // Does the dynamic string table contain `needle` (e.g. "St7__cxx11" for the new C++ ABI)?
  bool dynstr_contains(std::string_view needle) const;

 private:
  ElfFile() = default;
  std::string path_;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

// Parses fatbin containers (one per compiled .cu file, as found in .nv_fatbin) into the
// build's arch list: the architectures carried by at least `min_share` of the containers.
// A few kernels in a build carry extra code (libtorch_cuda 2.11+cu130: sm_103 in 59 of 444
// containers, sm_89 in 1); those do not make the library as a whole run on that arch.
std::vector<std::string> fatbin_arch_list(std::string_view fatbin, double min_share = 0.5);

}  // namespace trainbox::env
