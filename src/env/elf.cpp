#include <trainbox/env/elf.h>

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::env {

ElfFile ElfFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw SystemError("cannot open " + path + ": " + errno_text(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    throw DataError(path + ": not an ELF file (too small)");
  }
  void* p = mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw SystemError("cannot map " + path + ": " + errno_text(errno));
  ElfFile f;
  f.path_ = path;
  f.data_ = static_cast<const unsigned char*>(p);
  f.size_ = static_cast<std::size_t>(st.st_size);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(f.data_);
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
    throw DataError(path + ": not a 64-bit ELF file");
  // Offsets come from the file: compare without overflow (off > size || len > size - off).
  const std::size_t table = std::size_t(eh->e_shnum) * sizeof(Elf64_Shdr);
  if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > f.size_ ||
      table > f.size_ - eh->e_shoff || eh->e_shstrndx >= eh->e_shnum)
    throw DataError(path + ": ELF section table out of bounds");
  return f;
}

ElfFile::ElfFile(ElfFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

ElfFile::~ElfFile() {
  if (data_) munmap(const_cast<unsigned char*>(data_), size_);
}

std::string_view ElfFile::section(std::string_view name) const {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data_);  // offset 0 of an mmap: aligned
  // e_shoff comes from the file and need not be 8-byte aligned: copy each header out rather
  // than point into the mapping (a misaligned Elf64_Shdr reference is UB; found by fuzz_elf).
  auto header = [&](std::size_t i) {
    Elf64_Shdr h;
    std::memcpy(&h, data_ + eh->e_shoff + i * sizeof(Elf64_Shdr), sizeof h);
    return h;
  };
  auto in_file = [&](std::uint64_t off, std::uint64_t len) { return off <= size_ && len <= size_ - off; };
  const Elf64_Shdr strtab = header(eh->e_shstrndx);
  if (!in_file(strtab.sh_offset, strtab.sh_size)) return {};
  const char* names = reinterpret_cast<const char*>(data_ + strtab.sh_offset);
  for (std::size_t i = 0; i < eh->e_shnum; ++i) {
    const Elf64_Shdr sh = header(i);
    if (sh.sh_name >= strtab.sh_size) continue;
    std::string_view n(names + sh.sh_name, strnlen(names + sh.sh_name, strtab.sh_size - sh.sh_name));
    if (n != name) continue;
    if (sh.sh_type == SHT_NOBITS || !in_file(sh.sh_offset, sh.sh_size)) return {};
    return {reinterpret_cast<const char*>(data_ + sh.sh_offset), sh.sh_size};
  }
  return {};
}

std::vector<std::string> ElfFile::cuda_arch_list(double min_share) const {
  return fatbin_arch_list(section(".nv_fatbin"), min_share);
}

std::vector<std::string> ElfFile::runpath() const {
  std::string_view dyn = section(".dynamic"), dynstr = section(".dynstr");
  std::string found;
  for (std::size_t off = 0; off + sizeof(Elf64_Dyn) <= dyn.size(); off += sizeof(Elf64_Dyn)) {
    Elf64_Dyn d;
    std::memcpy(&d, dyn.data() + off, sizeof d);
    if (d.d_tag == DT_NULL) break;
    if ((d.d_tag == DT_RUNPATH || (d.d_tag == DT_RPATH && found.empty())) && d.d_un.d_val < dynstr.size())
      found = std::string(dynstr.data() + d.d_un.d_val,
                          strnlen(dynstr.data() + d.d_un.d_val, dynstr.size() - d.d_un.d_val));
  }
  std::string dir = path_.substr(0, path_.rfind('/'));
  std::vector<std::string> out;
  for (auto entry : split(found, ':')) {
    for (const char* origin : {"$ORIGIN", "${ORIGIN}"}) {
      auto pos = entry.find(origin);
      if (pos != std::string::npos) entry.replace(pos, std::strlen(origin), dir);
    }
    out.push_back(entry);
  }
  return out;
}

bool ElfFile::dynstr_contains(std::string_view needle) const {
  return section(".dynstr").find(needle) != std::string_view::npos;
}

// --- fatbin ---
// Layout (little-endian; as documented by NVIDIA's fatbinary.h and confirmed by the
// unit test against nvcc's own output): a container is a 16-byte header
//   u32 magic 0xBA55ED50 · u16 version · u16 header size · u64 size of the entries
// followed by entries, each
//   u16 kind (1 PTX, 2 or 0x10 ELF/SASS) · u16 · u32 entry header size · u64 padded payload size ·
//   u32 · u32 payload size · u32 · u16 minor · u16 major · u32 arch (e.g. 90) · …
// the next entry starts at entry + header size + padded payload size.
namespace {
constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;
template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

std::vector<std::string> fatbin_arch_list(std::string_view fb, double min_share) {
  std::map<std::pair<int, unsigned>, int> containers_with;  // (is_ptx, arch) → containers carrying it
  int containers = 0;
  std::size_t pos = 0;
  while (pos + 16 <= fb.size()) {
    if (load<std::uint32_t>(fb.data() + pos) != kFatbinMagic) {
      // Containers are 8-byte aligned; skip padding between them.
      auto next = fb.find(std::string_view("\x50\xed\x55\xba", 4), pos + 1);
      if (next == std::string_view::npos) break;
      pos = next;
      continue;
    }
    std::uint16_t hdr = load<std::uint16_t>(fb.data() + pos + 6);
    std::uint64_t body = load<std::uint64_t>(fb.data() + pos + 8);
    std::size_t end = std::min<std::size_t>(fb.size(), pos + hdr + body);
    std::size_t e = pos + hdr;
    std::set<std::pair<int, unsigned>> here;
    while (e + 32 <= end) {
      std::uint16_t kind = load<std::uint16_t>(fb.data() + e);
      std::uint32_t ehdr = load<std::uint32_t>(fb.data() + e + 4);
      std::uint64_t payload = load<std::uint64_t>(fb.data() + e + 8);
      std::uint32_t arch = load<std::uint32_t>(fb.data() + e + 28);
      // Sizes come from the file: never step backwards or past the container's end.
      if (ehdr < 32 || ehdr > 4096 || ehdr > end - e || payload > end - e - ehdr) break;
      bool sass = kind == 2 || kind == 0x10, ptx = kind == 1;
      if ((sass || ptx) && arch > 0 && arch < 1000) here.insert({ptx ? 1 : 0, arch});
      e += ehdr + payload;
    }
    if (!here.empty()) ++containers;
    for (const auto& k : here) ++containers_with[k];
    pos = std::max(end, pos + 16);
  }
  std::vector<std::string> out;
  for (const auto& [key, n] : containers_with)  // map order: all SASS, then PTX, each by arch
    if (n >= min_share * containers) out.push_back((key.first ? "compute_" : "sm_") + std::to_string(key.second));
  return out;
}

}  // namespace trainbox::env
