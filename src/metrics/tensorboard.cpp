// TensorBoard event-file writer.
//
// The protobuf encoding is written by hand: the file needs four message types with two or three
// fields each (Event, Summary, Summary.Value and the record framing around them), which takes
// ~40 lines of varint / fixed32 / fixed64 / length-delimited encoding. Linking libprotobuf (and
// generating code from TensorBoard's .proto files) for that would add a heavy build and ABI
// dependency — one that must also match whatever protobuf torch's environment carries. The test
// that keeps this honest is TensorBoard's own reader (tests/integration/formats_vs_python.py).
#include <trainbox/metrics/tensorboard.h>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>

namespace trainbox::metrics {
namespace {

// --- CRC-32C ---
// Byte-at-a-time table (1 KiB). Records are a few dozen bytes, so slicing-by-8 or SSE4.2 crc32
// instructions would save nothing measurable next to the write(2) per scalar.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1U) ? (c >> 1) ^ 0x82F63B78U : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kCrc32cTable = make_crc32c_table();

// --- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) ---
// A field key is (field_number << 3) | wire_type; all our field numbers are < 16, so one byte.
constexpr char key(int field, int wire_type) { return static_cast<char>((field << 3) | wire_type); }
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// Event (tensorboard/compat/proto/event.proto)
constexpr char kEventWallTime = key(1, kFixed64);             // double
constexpr char kEventStep = key(2, kVarint);                  // int64
constexpr char kEventFileVersion = key(3, kLengthDelimited);  // string
constexpr char kEventSummary = key(5, kLengthDelimited);      // Summary
// Summary (summary.proto)
constexpr char kSummaryValue = key(1, kLengthDelimited);  // repeated Summary.Value
// Summary.Value
constexpr char kValueTag = key(1, kLengthDelimited);  // string
constexpr char kValueSimpleValue = key(2, kFixed32);  // float
static_assert(kEventWallTime == 0x09 && kEventStep == 0x10 && kEventFileVersion == 0x1A && kEventSummary == 0x2A &&
              kSummaryValue == 0x0A && kValueTag == 0x0A && kValueSimpleValue == 0x15);

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
// Little-endian, independent of the host's byte order.
void put_le(std::string& out, std::uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_double(std::string& out, char field_key, double v) {
  out.push_back(field_key);
  put_le(out, std::bit_cast<std::uint64_t>(v), 8);
}
void put_float(std::string& out, char field_key, float v) {
  out.push_back(field_key);
  put_le(out, std::bit_cast<std::uint32_t>(v), 4);
}
// int64 fields are plain varints of the two's-complement value: negative steps take 10 bytes.
void put_int64(std::string& out, char field_key, std::int64_t v) {
  out.push_back(field_key);
  put_varint(out, static_cast<std::uint64_t>(v));
}
void put_bytes(std::string& out, char field_key, std::string_view bytes) {
  out.push_back(field_key);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = 0xFFFFFFFFU;
  for (std::size_t i = 0; i < n; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xFFU] ^ (c >> 8);
  return c ^ 0xFFFFFFFFU;
}

std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8U;  // unsigned: wraps modulo 2^32
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec)
    throw SystemError(fmt::format("cannot create TensorBoard log directory {}: {}", log_dir, errno_text(ec.value())));

  // O_EXCL: a second writer in the same directory, process and second must not truncate the
  // first one's file. It gets a ".<n>" suffix, which sorts after the first file — TensorBoard
  // reads a run's files in name order.
  const std::string base = fmt::format("{}/events.out.tfevents.{:010d}.{}.{}.trainbox", log_dir,
                                       static_cast<long long>(std::time(nullptr)), host_name("localhost"), ::getpid());
  int fd = -1;
  for (int n = 0; n < 1000; ++n) {
    path_ = n == 0 ? base : fmt::format("{}.{}", base, n);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) throw SystemError(fmt::format("cannot create TensorBoard event file {}: {}", path_, errno_text(errno)));
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    throw SystemError(fmt::format("cannot open TensorBoard event file {}: {}", path_, errno_text(err)));
  }

  std::string event;
  put_double(event, kEventWallTime, now_seconds());
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  try {
    write_record(event);
  } catch (...) {
    close_noexcept();
    throw;
  }
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}

TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    close_noexcept();
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

TensorBoardWriter::~TensorBoardWriter() { close_noexcept(); }

void TensorBoardWriter::close_noexcept() noexcept {
  if (file_ == nullptr) return;
  std::fflush(file_);
  ::fsync(::fileno(file_));
  std::fclose(file_);
  file_ = nullptr;
}

void TensorBoardWriter::add_scalar(const std::string& tag, float value, std::int64_t step, double wall_time) {
  std::string v;
  put_bytes(v, kValueTag, tag);
  put_float(v, kValueSimpleValue, value);
  std::string summary;
  put_bytes(summary, kSummaryValue, v);
  std::string event;
  put_double(event, kEventWallTime, wall_time < 0 ? now_seconds() : wall_time);
  put_int64(event, kEventStep, step);
  put_bytes(event, kEventSummary, summary);
  write_record(event);
}

// TFRecord framing: u64 length · u32 masked_crc32c(length bytes) · data · u32 masked_crc32c(data).
void TensorBoardWriter::write_record(const std::string& event) {
  if (file_ == nullptr) throw UsageError("TensorBoardWriter: write to a moved-from writer");
  std::string rec;
  rec.reserve(event.size() + 16);
  put_le(rec, event.size(), 8);
  put_le(rec, masked_crc32c(rec.data(), 8), 4);
  rec += event;
  put_le(rec, masked_crc32c(event.data(), event.size()), 4);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0)
    throw SystemError(fmt::format("cannot write TensorBoard event file {}: {}", path_, errno_text(errno)));
}

void TensorBoardWriter::flush() {
  if (file_ == nullptr) return;
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    throw SystemError(fmt::format("cannot flush TensorBoard event file {}: {}", path_, errno_text(errno)));
}

}  // namespace trainbox::metrics
