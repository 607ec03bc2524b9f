#include <trainbox/env/dynlib.h>

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>

namespace trainbox::env {

DynLib::DynLib(DynLib&& o) noexcept
    : handle_(o.handle_), error_(std::move(o.error_)), path_(std::move(o.path_)), soname_(std::move(o.soname_)) {
  o.handle_ = nullptr;
}

DynLib& DynLib::operator=(DynLib&& o) noexcept {
  if (this != &o) {
    if (handle_) dlclose(handle_);
    handle_ = o.handle_;
    o.handle_ = nullptr;
    error_ = std::move(o.error_);
    path_ = std::move(o.path_);
    soname_ = std::move(o.soname_);
  }
  return *this;
}

DynLib::~DynLib() {
  if (handle_) dlclose(handle_);
}

DynLib DynLib::open(const std::vector<std::string>& names, const std::vector<std::string>& dirs, bool default_search) {
  DynLib lib;
  std::vector<std::string> attempts;
  for (const auto& d : dirs)
    for (const auto& n : names) attempts.push_back(d + "/" + n);
  if (default_search) attempts.insert(attempts.end(), names.begin(), names.end());

  for (const auto& a : attempts) {
    // RTLD_LOCAL: the probe's copies must not satisfy symbols for anything loaded later.
    // RTLD_NODELETE: dlclose never unmaps them. cuBLAS and cuBLASLt link libstdc++
    // statically and allocate its exception pool when loaded; unmapping orphans it (a leak
    // from an unknown module, to LeakSanitizer), and unloading CUDA libraries mid-process is
    // a known source of crashes at exit. Each loads once per process either way.
    void* h = dlopen(a.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
      const char* e = dlerror();
      // Missing files in explicit dirs are expected; keep the message of real failures
      // (wrong ELF class, missing dependency, version mismatch) and of the default search.
      std::string msg = e ? e : "unknown dlopen error";
      bool not_found = msg.find("No such file") != std::string::npos;
      if (!not_found || a.find('/') == std::string::npos) {
        if (!lib.error_.empty()) lib.error_ += "; ";
        lib.error_ += msg;
      }
      continue;
    }
    lib.handle_ = h;
    lib.soname_ = a.substr(a.rfind('/') + 1);
    struct link_map* lm = nullptr;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) {
      char buf[PATH_MAX];
      lib.path_ = realpath(lm->l_name, buf) ? buf : lm->l_name;
    }
    lib.error_.clear();
    return lib;
  }
  if (lib.error_.empty()) lib.error_ = names.empty() ? "no library name given" : names.front() + ": not found";
  return lib;
}

void* DynLib::raw_symbol(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

}  // namespace trainbox::env
