// A tar shard in the WebDataset layout, as the imagefolder/webdataset loaders read it:
// data::list_tar (every header: ustar, GNU 'L', pax 'x', base-256 sizes) and data::index_shard
// (grouping into samples, labels), then ShardReader::next reading every image. Rejection is a
// DataError; what is accepted lies inside the file, and the two readers agree.
#include <cstdio>
#include <string>

#include "fuzz_common.h"
#include <trainbox/data/image/tar.h>
#include <trainbox/data/image/webdataset.h>
#include <trainbox/util/errors.h>

namespace data = trainbox::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* in, std::size_t size) {
  static trainbox::fuzz::InputFile file;
  const std::string& path = file.write(in, size);
  try {
    for (const data::TarMember& m : data::list_tar(path)) {
      FUZZ_CHECK(m.offset >= m.header_offset + data::kTarBlock);
      FUZZ_CHECK(m.offset <= size && m.size <= size - m.offset);
    }
  } catch (const trainbox::DataError&) {
  }
  try {
    const auto index = data::index_shard(path);
    data::ShardReader r(path);
    data::WdsSample s;
    std::size_t n = 0;
    while (r.next(s)) {
      FUZZ_CHECK(n < index.size());
      FUZZ_CHECK(s.key == index[n].key && s.label == index[n].label && s.label >= 0);
      FUZZ_CHECK(s.image.size() == index[n].image_size && s.image_offset + s.image.size() <= size);
      ++n;
    }
    FUZZ_CHECK(n == index.size());
  } catch (const trainbox::DataError&) {
  }
  return 0;
}
