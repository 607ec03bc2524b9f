// An IDX images/labels pair, as load_idx reads Fashion-MNIST: each file through read_maybe_gz
// (plain or gzip), then parse_idx_pair (trainbox/data/formats.h). Input: byte 0 = classes - 1,
// bytes 1-2 = the images file's length n (little-endian; cut to what is there), the next n
// bytes = the images file, the rest = the labels file. Rejection is a DataError; what is
// accepted is exactly what load_idx copies into tensors: dims that fill each file to its end,
// as many labels as images, every label < classes.
#include <algorithm>
#include <cstdio>
#include <string>

#include <trainbox/data/formats.h>
#include "fuzz_common.h"
#include <trainbox/util/errors.h>

namespace data = trainbox::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* in, std::size_t size) {
  static trainbox::fuzz::InputFile images_file, labels_file;
  if (size < 3) return 0;
  const std::int64_t classes = std::int64_t(in[0]) + 1;
  const std::size_t n = std::min<std::size_t>(in[1] | (std::size_t(in[2]) << 8), size - 3);
  const std::string images_path = images_file.write(in + 3, n),
                    labels_path = labels_file.write(in + 3 + n, size - 3 - n);
  try {
    const std::string ib = data::read_maybe_gz(images_path), lb = data::read_maybe_gz(labels_path);
    const data::IdxPair p = data::parse_idx_pair(ib, images_path, lb, labels_path, classes);
    const auto &id = p.images.dims, &ld = p.labels.dims;
    FUZZ_CHECK(id.size() == 3 && ld.size() == 1 && p.images.data_offset == 16 && p.labels.data_offset == 8);
    for (auto d : id) FUZZ_CHECK(d >= 1 && d <= (1 << 28));
    FUZZ_CHECK(ld[0] == id[0]);
    // The memcpy in load_idx: n x rows x cols bytes from offset 16, n labels from offset 8.
    FUZZ_CHECK(std::uint64_t(id[0]) * std::uint64_t(id[1]) * std::uint64_t(id[2]) == ib.size() - 16);
    FUZZ_CHECK(std::uint64_t(ld[0]) == lb.size() - 8);
    for (std::size_t i = 8; i < lb.size(); ++i) FUZZ_CHECK(static_cast<unsigned char>(lb[i]) < classes);
  } catch (const trainbox::DataError&) {
  }
  return 0;
}
