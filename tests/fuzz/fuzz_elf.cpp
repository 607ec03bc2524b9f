// ElfFile on arbitrary bytes, as `trainbox doctor` reads libtorch_cuda.so and friends: every
// query, none may read outside the file.
#include "fuzz_common.h"
#include <trainbox/env/elf.h>
#include <trainbox/util/errors.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static trainbox::fuzz::InputFile file;
  try {
    auto f = trainbox::env::ElfFile::open(file.write(data, size));
    (void)f.section(".nv_fatbin");
    (void)f.cuda_arch_list();
    (void)f.runpath();
    (void)f.dynstr_contains("St7__cxx11");
  } catch (const trainbox::Error&) {
  }
  return 0;
}
