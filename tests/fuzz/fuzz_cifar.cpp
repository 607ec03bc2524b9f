// A CIFAR-10 binary batch file, as load_cifar10 reads data_batch_N.bin: through read_maybe_gz
// (plain or gzip), then parse_cifar10 (trainbox/data/formats.h). Rejection is a DataError; what is
// accepted is whole 3073-byte records, at least one, each label byte < 10.
#include <cstdio>
#include <string>

#include <trainbox/data/formats.h>
#include "fuzz_common.h"
#include <trainbox/util/errors.h>

namespace data = trainbox::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* in, std::size_t size) {
  static trainbox::fuzz::InputFile file;
  const std::string& path = file.write(in, size);
  try {
    const std::string b = data::read_maybe_gz(path);
    const std::int64_t n = data::parse_cifar10(b, path);
    FUZZ_CHECK(n >= 1 && std::uint64_t(n) * data::kCifar10RecordBytes == b.size());
    for (std::int64_t i = 0; i < n; ++i) FUZZ_CHECK(static_cast<unsigned char>(b[i * data::kCifar10RecordBytes]) < 10);
  } catch (const trainbox::DataError&) {
  }
  return 0;
}
