// read_safetensors_header on arbitrary bytes: reject with DataError, never read past the file.
#include <cstdio>
#include <map>

#include "fuzz_common.h"
#include <trainbox/io/safetensors.h>
#include <trainbox/util/errors.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static trainbox::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  try {
    std::map<std::string, std::string> meta;
    auto entries = trainbox::io::read_safetensors_header(path, &meta);
    // What it accepts is consistent: in data order, sizes matching dtype × shape, no overlap.
    std::uint64_t at = 0;
    for (const auto& e : entries) {
      FUZZ_CHECK(e.begin == at && e.end >= e.begin);
      std::uint64_t n = trainbox::io::dtype_size(e.dtype);
      for (auto d : e.shape) {
        FUZZ_CHECK(d >= 0);
        n *= static_cast<std::uint64_t>(d);
      }
      FUZZ_CHECK(e.end - e.begin == n);
      at = e.end;
    }
  } catch (const trainbox::Error&) {
  }
  return 0;
}
