#include <gtest/gtest.h>

#include <elf.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <trainbox/env/elf.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {
// Builds one fatbin container holding entries of (kind, arch).
std::string container(const std::vector<std::pair<int, int>>& entries) {
  std::string body;
  for (auto [kind, arch] : entries) {
    std::string e(64, '\0');
    std::uint16_t k = kind;
    std::uint32_t hs = 64, a = arch;
    std::uint64_t payload = 8;
    std::memcpy(&e[0], &k, 2);
    std::memcpy(&e[4], &hs, 4);
    std::memcpy(&e[8], &payload, 8);
    std::memcpy(&e[28], &a, 4);
    body += e + std::string(payload, 'x');
  }
  std::string h(16, '\0');
  std::uint32_t magic = 0xBA55ED50;
  std::uint16_t ver = 1, hsz = 16;
  std::uint64_t size = body.size();
  std::memcpy(&h[0], &magic, 4);
  std::memcpy(&h[4], &ver, 2);
  std::memcpy(&h[6], &hsz, 2);
  std::memcpy(&h[8], &size, 8);
  return h + body;
}
}  // namespace

TEST(Fatbin, ListsSassThenPtxSorted) {
  auto fb = container({{2, 90}, {1, 90}, {2, 75}});
  EXPECT_EQ(env::fatbin_arch_list(fb), (std::vector<std::string>{"sm_75", "sm_90", "compute_90"}));
}

TEST(Fatbin, ArchInFewContainersIsNotTheBuildsArch) {
  std::string fb;
  for (int i = 0; i < 9; ++i) fb += container({{2, 80}, {2, 90}});
  fb += std::string(8, '\0');  // padding between containers is skipped
  fb += container({{2, 80}, {2, 90}, {2, 103}});
  EXPECT_EQ(env::fatbin_arch_list(fb), (std::vector<std::string>{"sm_80", "sm_90"}));
  EXPECT_EQ(env::fatbin_arch_list(fb, 0.0), (std::vector<std::string>{"sm_80", "sm_90", "sm_103"}));
}

TEST(Fatbin, GarbageGivesNothingNotACrash) {
  EXPECT_TRUE(env::fatbin_arch_list(std::string(1000, '\x7f')).empty());
  auto fb = container({{2, 90}});
  // Truncated inside the first entry header: nothing complete to read (ASan builds check the bounds).
  EXPECT_TRUE(env::fatbin_arch_list(fb.substr(0, 40)).empty());
}

#ifdef TRAINBOX_FATBIN_FIXTURE
// nvcc built this library with SASS for sm_75 and sm_90 and PTX for compute_90.
TEST(Fatbin, MatchesWhatNvccBuilt) {
  auto f = env::ElfFile::open(TRAINBOX_FATBIN_FIXTURE);
  EXPECT_EQ(f.cuda_arch_list(), (std::vector<std::string>{"sm_75", "sm_90", "compute_90"}));
}
#endif

TEST(Elf, OpensItself) {
  auto f = env::ElfFile::open("/proc/self/exe");
  EXPECT_FALSE(f.section(".text").empty());
  EXPECT_TRUE(f.section(".nv_fatbin").empty());
  EXPECT_TRUE(f.cuda_arch_list().empty());
}

TEST(Elf, NonElfIsDataError) {
  EXPECT_THROW(env::ElfFile::open("/etc/os-release"), DataError);
  EXPECT_THROW(env::ElfFile::open("/nonexistent/lib.so"), SystemError);
}

TEST(Elf, HostileSectionTableOffsetIsRejected) {
  // A 64-bit ELF header whose section table offset wraps around when added to its size.
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_shoff = ~std::uint64_t(0) - 63;
  eh.e_shnum = 1;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  std::string path = "/tmp/trainbox-hostile-elf-" + std::to_string(::getpid());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&eh), sizeof eh);
    out << std::string(256, '\0');
  }
  EXPECT_THROW(env::ElfFile::open(path), DataError);
  std::remove(path.c_str());
}

TEST(Fatbin, HostilePayloadSizeStopsTheWalk) {
  // An entry whose payload size would move the cursor backwards (wrap-around): no hang, no read past the end.
  auto fb = container({{2, 90}, {2, 80}});
  std::uint64_t evil = ~std::uint64_t(0) - 63;
  std::memcpy(&fb[16 + 64 + 8 + 8], &evil, 8);  // the second entry (header 64 + payload 8 after the first)
  EXPECT_EQ(env::fatbin_arch_list(fb), (std::vector<std::string>{"sm_90"}));
}
