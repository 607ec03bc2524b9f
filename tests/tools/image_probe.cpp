// image_probe: src/data/image (decode.h, transform.h) from the command line, for
// tests/integration/image_vs_pil.py to compare with PIL and torchvision.
//   image_probe decode FILE OUT.raw [MIN_W MIN_H]   int32 width, int32 height, then HWC RGB8
//   image_probe crop FILE TOP LEFT H W OUT_H OUT_W OUT.raw [MIN_W MIN_H] [flip]
//                                                   float32 CHW of x / 255 (mean 0, std 1)
//   image_probe rcrop FILE TOP LEFT H W OUT_H OUT_W OUT.raw [MIN_W MIN_H]
//                                                   the same crop from a region decode of the box;
//                                                   also prints "region X Y W H" (origin and size)
//   image_probe center FILE RESIZE CROP OUT.raw     the eval crop (center_crop_box), float32 CHW
//   image_probe rrc W H SCALE_LO SCALE_HI RATIO_LO RATIO_HI SEED N
//                                                   N RandomResizedCrop boxes of sample_rng(SEED, 0, k),
//                                                   one JSON line each with the draws that made it
// Prints "scale NUM/DEN" (and the box, for center) on stdout. A bad file: one line on stderr,
// exit 2 (the DataError's code).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <trainbox/data/image/decode.h>
#include <trainbox/data/image/transform.h>
#include <trainbox/util/errors.h>

namespace img = trainbox::data::image;

namespace {

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw trainbox::DataError("cannot open " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const void* data, std::size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, n, f) != n) throw trainbox::SystemError("cannot write " + path);
  std::fclose(f);
}

// Rng with every draw logged, so that the test can replay them through torchvision's get_params.
struct RecordingRng {
  img::Rng rng;
  std::string log;
  double uniform(double lo, double hi) {
    const double v = rng.uniform(lo, hi);
    log += fmt::format("{}[\"u\",{:.17g},{:.17g},{:.17g}]", log.empty() ? "" : ",", lo, hi, v);
    return v;
  }
  std::int64_t randint(std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = rng.randint(lo, hi);
    log += fmt::format("{}[\"i\",{},{},{}]", log.empty() ? "" : ",", lo, hi, v);
    return v;
  }
};

void write_crop(const img::Image& im, img::CropBox box, int oh, int ow, bool flip, const std::string& out) {
  const float mean[3] = {0, 0, 0}, stdv[3] = {1, 1, 1};
  std::vector<float> chw(std::size_t(3) * oh * ow);
  img::resized_crop(im, box, oh, ow, flip, mean, stdv, chw.data());
  write_file(out, chw.data(), chw.size() * sizeof(float));
  fmt::print("scale {}/{}\n", im.scale_num, im.scale_den);
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  auto arg = [&](int i) { return std::stoi(argv[i]); };
  if (cmd == "decode" && (argc == 4 || argc == 6)) {
    const auto bytes = read_file(argv[2]);
    const img::Image im = img::decode(bytes.data(), bytes.size(), argc == 6 ? arg(4) : 0, argc == 6 ? arg(5) : 0);
    std::vector<std::uint8_t> out(8 + im.rgb.size());
    const std::int32_t wh[2] = {im.width, im.height};
    std::memcpy(out.data(), wh, 8);
    std::memcpy(out.data() + 8, im.rgb.data(), im.rgb.size());
    write_file(argv[3], out.data(), out.size());
    fmt::print("scale {}/{}\n", im.scale_num, im.scale_den);
    return 0;
  }
  if (cmd == "crop" && argc >= 10 && argc <= 13) {
    const auto bytes = read_file(argv[2]);
    const img::Image im = img::decode(bytes.data(), bytes.size(), argc >= 12 ? arg(10) : 0, argc >= 12 ? arg(11) : 0);
    const bool flip = argc == 13 || argc == 11;
    write_crop(im, {arg(3), arg(4), arg(5), arg(6)}, arg(7), arg(8), flip, argv[9]);
    return 0;
  }
  if (cmd == "rcrop" && (argc == 10 || argc == 12)) {
    const auto bytes = read_file(argv[2]);
    const img::CropBox box{arg(3), arg(4), arg(5), arg(6)};
    const img::Image im =
        img::decode(bytes.data(), bytes.size(), argc == 12 ? arg(10) : 0, argc == 12 ? arg(11) : 0, &box);
    fmt::print("region {} {} {} {}\n", im.origin_x, im.origin_y, im.width, im.height);
    write_crop(im, box, arg(7), arg(8), false, argv[9]);
    return 0;
  }
  if (cmd == "center" && argc == 6) {
    const auto bytes = read_file(argv[2]);
    const img::Image im = img::decode(bytes.data(), bytes.size());
    const img::CropBox b = img::center_crop_box(im.width, im.height, arg(3), arg(4), arg(4));
    fmt::print("box {} {} {} {}\n", b.top, b.left, b.height, b.width);
    write_crop(im, b, arg(4), arg(4), false, argv[5]);
    return 0;
  }
  if (cmd == "rrc" && argc == 10) {
    for (int k = 0; k < arg(9); ++k) {
      RecordingRng r{img::sample_rng(std::stoull(argv[8]), 0, k), {}};
      const img::CropBox b = img::random_resized_crop_box(arg(2), arg(3), std::stod(argv[4]), std::stod(argv[5]),
                                                          std::stod(argv[6]), std::stod(argv[7]), r);
      fmt::print("{{\"box\":[{},{},{},{}],\"draws\":[{}]}}\n", b.top, b.left, b.height, b.width, r.log);
    }
    return 0;
  }
  std::fprintf(stderr, "usage: image_probe decode|crop|rcrop|center|rrc ... (see tests/tools/image_probe.cpp)\n");
  return trainbox::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const trainbox::Error& e) {
    std::fprintf(stderr, "image_probe: %s: %s\n", argc > 2 ? argv[2] : "", e.what());
    return e.exit_code();
  }
}
