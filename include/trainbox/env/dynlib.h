// trainbox/env/dynlib.h — a dlopen handle (released, never unmapped), and symbol lookup.
//
// The probe loads the GPU stack's libraries itself (libcuda, NVML, cudart, cuDNN,
// NCCL, cuBLAS) rather than linking them, so `trainbox doctor` runs — and explains —
// exactly when one of them is missing or broken.
//
//   auto lib = DynLib::open({"libnccl.so.2"}, search_dirs);
//   if (!lib) puts(lib.error().c_str());
//   auto get = lib.symbol<int (*)(int*)>("ncclGetVersion");
#pragma once
#include <string>
#include <vector>

namespace trainbox::env {

class DynLib {
 public:
  DynLib() = default;
  DynLib(DynLib&& o) noexcept;
  DynLib& operator=(DynLib&& o) noexcept;
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;
  ~DynLib();

  // Tries each name in each of `dirs` (as dir/name), in order; then, if
  // `default_search`, each bare name through the normal dynamic-linker search.
  static DynLib open(const std::vector<std::string>& names, const std::vector<std::string>& dirs,
                     bool default_search = true);

  explicit operator bool() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }    // every attempt's dlerror(), "; "-joined
  const std::string& path() const { return path_; }      // real path of the file that loaded
  const std::string& soname() const { return soname_; }  // the name that succeeded

  template <class Fn>
  Fn symbol(const char* name) const {
    return reinterpret_cast<Fn>(raw_symbol(name));
  }
  void* raw_symbol(const char* name) const;

 private:
  void* handle_ = nullptr;
  std::string error_, path_, soname_;
};

}  // namespace trainbox::env
