// What --resume trusts from disk (train/checkpoint.h): a checkpoint's COMPLETE marker and
// MANIFEST.json, and the run dir's `latest` pointer. Input: three parts separated by "\n--\n":
// COMPLETE, MANIFEST.json, latest. verify() reports problems and never throws; latest() and
// check_resumable() reject with DataError only. The checkpoint holds one real file, w.bin.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include <trainbox/train/checkpoint.h>
#include <trainbox/util/errors.h>

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string run = [] {
    std::string d = fs::temp_directory_path().string() + "/trainbox-fuzz-ckpt-" + std::to_string(::getpid());
    fs::create_directories(d + "/checkpoints/step_5");
    std::ofstream(d + "/checkpoints/step_5/w.bin") << "abc";
    return d;
  }();
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> part;
  for (std::size_t pos = 0;;) {
    auto sep = in.find("\n--\n", pos);
    part.push_back(in.substr(pos, sep == std::string::npos ? std::string::npos : sep - pos));
    if (sep == std::string::npos || part.size() == 3) break;
    pos = sep + 4;
  }
  part.resize(3);
  const std::string dir = run + "/checkpoints/step_5";
  auto put = [](const std::string& path, const std::string& text, bool present) {
    if (present)
      std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    else
      fs::remove(path);
  };
  put(dir + "/" + trainbox::train::kCheckpointComplete, part[0], !part[0].empty());
  put(dir + "/" + trainbox::train::kCheckpointManifest, part[1], !part[1].empty());
  put(run + "/checkpoints/latest", part[2], !part[2].empty());
  for (const auto& p : trainbox::train::CheckpointStore::verify(dir)) FUZZ_CHECK(!p.file.empty() && !p.detail.empty());
  try {
    (void)trainbox::train::CheckpointStore::check_resumable(dir);
  } catch (const trainbox::DataError&) {
  }
  try {
    std::vector<std::string> notes;
    trainbox::train::CheckpointStore store(run, 3);
    auto got = store.latest(&notes);
    FUZZ_CHECK(got && *got == dir);  // the only candidate: chosen only if it verifies
    FUZZ_CHECK(trainbox::train::CheckpointStore::verify(dir).empty());
  } catch (const trainbox::DataError&) {
  }
  return 0;
}
