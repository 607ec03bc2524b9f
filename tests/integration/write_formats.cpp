// Writes one of each file format trainbox produces, with awkward values, for
// formats_vs_python.py to read back with TensorBoard's and Hugging Face's own readers.
// The values are duplicated in that script on purpose: it checks them against its own copy,
// not against anything this program reports.
//
//   write_formats OUT_DIR   → OUT_DIR/events/…tfevents…, OUT_DIR/events_negative_step/…,
//                             OUT_DIR/numpy.safetensors, OUT_DIR/bf16.safetensors
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <trainbox/io/safetensors.h>
#include <trainbox/metrics/tensorboard.h>
#include <trainbox/util/errors.h>

using trainbox::io::DType;
using trainbox::io::TensorView;

namespace {

template <typename T>
TensorView view(const std::string& name, DType dtype, std::vector<std::int64_t> shape, const std::vector<T>& v) {
  return {name, dtype, std::move(shape), v.data(), v.size() * sizeof(T)};
}

void write_events(const std::string& out) {
  constexpr std::int64_t kBig = std::int64_t{1} << 40;
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kMax = std::numeric_limits<float>::max();
  // Steps never decrease across the file: TensorBoard treats a lower step as a restart.
  trainbox::metrics::TensorBoardWriter tb(out + "/events");
  tb.add_scalar("train/loss", 2.5f, 0);
  tb.add_scalar("train/loss", 0.1f, 1);
  tb.add_scalar("train/loss", 1e-8f, 2);
  tb.add_scalar("eval/accuracy", 0.5f, 2, 1700000000.25);
  tb.add_scalar("train/loss", -3.5f, 3);
  tb.add_scalar("train/loss", -0.0f, 4);
  tb.add_scalar("train/loss", 1e-45f, 5);  // float32 denormal
  tb.add_scalar("train/loss", kNaN, 6);
  tb.add_scalar("train/loss", kMax, kBig);
  tb.add_scalar("eval/accuracy", 0.9375f, kBig, 1700000001.5);
  tb.flush();

  trainbox::metrics::TensorBoardWriter neg(out + "/events_negative_step");
  neg.add_scalar("x", 1.0f, -7, 1.0);
}

void write_numpy_file(const std::string& out) {
  const std::vector<double> f64{1.0 / 3.0, -0.0, 1e300};
  const std::vector<float> f32{0.1f,
                               -3.5f,
                               1e-8f,
                               -0.0f,
                               std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               1e-45f,
                               std::numeric_limits<float>::max()};
  const std::vector<std::uint16_t> f16{0x3C00, 0xFC00};  // 1.0, -inf
  const std::vector<std::int64_t> i64{0, -1, std::numeric_limits<std::int64_t>::min()};
  const std::vector<std::int32_t> i32{std::numeric_limits<std::int32_t>::max(), -2};
  const std::vector<std::int16_t> i16{-32768, 12345};
  const std::vector<std::int8_t> i8{-128, 0, 127};
  const std::vector<std::uint8_t> u8{0, 1, 2, 253, 254, 255};
  const std::vector<std::uint8_t> b{1, 0, 0, 1};
  const std::vector<float> scalar{42.5f};
  const std::vector<std::int32_t> empty;
  trainbox::io::write_safetensors(
      out + "/numpy.safetensors",
      {view("f64", DType::kF64, {3}, f64), view("f32", DType::kF32, {2, 4}, f32), view("f16", DType::kF16, {2}, f16),
       view("i64", DType::kI64, {3}, i64), view("i32", DType::kI32, {2}, i32), view("i16", DType::kI16, {2}, i16),
       view("i8", DType::kI8, {3}, i8), view("u8", DType::kU8, {2, 3}, u8), view("bool", DType::kBool, {4}, b),
       view("scalar", DType::kF32, {}, scalar), view("empty", DType::kI32, {0}, empty)},
      {{"format", "np"}, {"source", "trainbox write_formats"}});
}

void write_bf16_file(const std::string& out) {
  // 1, -1, 3.140625, inf, smallest denormal, NaN
  const std::vector<std::uint16_t> w{0x3F80, 0xBF80, 0x4049, 0x7F80, 0x0001, 0x7FC0};
  const std::vector<float> bias{0.5f, -1.25f, 1e-8f};
  const std::vector<std::int64_t> step{std::int64_t{1} << 40};
  const std::vector<std::uint8_t> ids;
  const std::vector<std::uint8_t> flags{7, 8, 9};
  trainbox::io::write_safetensors(
      out + "/bf16.safetensors",
      {view("w", DType::kBF16, {2, 3}, w), view("bias", DType::kF32, {3}, bias), view("step", DType::kI64, {}, step),
       view("ids", DType::kU8, {0, 4}, ids), view("flags", DType::kU8, {3}, flags)},
      {{"format", "pt"}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return trainbox::kExitUsage;
  }
  try {
    write_events(argv[1]);
    write_numpy_file(argv[1]);
    write_bf16_file(argv[1]);
  } catch (const trainbox::Error& e) {
    return trainbox::report_error(e, "write_formats");
  }
  return trainbox::kExitOk;
}
