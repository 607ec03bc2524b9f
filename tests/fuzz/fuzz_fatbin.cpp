// fatbin_arch_list on arbitrary bytes (a .nv_fatbin section's contents; reaching it through
// a whole ELF file is rare for a fuzzer, so it has a harness of its own).
#include <string_view>

#include "fuzz_common.h"
#include <trainbox/env/elf.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view fb(reinterpret_cast<const char*>(data), size);
  auto all = trainbox::env::fatbin_arch_list(fb, 0.0);
  auto most = trainbox::env::fatbin_arch_list(fb, 0.5);
  FUZZ_CHECK(most.size() <= all.size());
  for (const auto& a : all) FUZZ_CHECK(a.rfind("sm_", 0) == 0 || a.rfind("compute_", 0) == 0);
  return 0;
}
