// trainbox/metrics/tensorboard.h — scalar logging to TensorBoard event files, without TensorFlow.
//
// One TensorBoardWriter owns one event file in `log_dir`, named
// events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.trainbox (TensorBoard picks up any
// file whose name contains "tfevents"; one directory = one run in its UI). Records are
// TFRecord-framed `Event` protos; each scalar is a legacy `simple_value`, which TensorBoard's reader
// still reads and migrates to its current form (see the reference formats-and-numbers.md).
//
// Contract: not thread-safe — one writer per run, on one thread (in DDP: rank 0 only). Every
// add_scalar() reaches the kernel before it returns (fflush, one write(2)), so a live TensorBoard
// sees it and a killed process loses nothing already logged; flush() additionally fsyncs. Steps
// should not decrease within a file: TensorBoard treats a lower step as a restart and drops
// the later-step points it already has. Errors throw trainbox::SystemError naming the file.
//
//   trainbox::metrics::TensorBoardWriter tb("runs/mlp-lr3e-4");   // throws SystemError
//   for (std::int64_t step = 0; step < steps; ++step) {
//     tb.add_scalar("train/loss", loss, step);
//   }
//   tb.flush();                                                    // also done by the destructor
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace trainbox::metrics {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it.
// crc32c("123456789", 9) == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t n);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32.
std::uint32_t masked_crc32c(const void* data, std::size_t n);

class TensorBoardWriter {
 public:
  // Creates `log_dir` (and parents) if needed, then the event file with its first record
  // (wall_time, file_version "brain.Event:2"). Throws SystemError naming the path and errno.
  explicit TensorBoardWriter(const std::string& log_dir);
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();  // flushes and closes; never throws

  // One Event {wall_time, step, Summary{Value{tag, simple_value}}}. wall_time is seconds since
  // the Unix epoch; a negative value means "now". Throws SystemError if the write fails.
  void add_scalar(const std::string& tag, float value, std::int64_t step, double wall_time = -1);

  // fflush + fsync: everything written so far is on disk. Throws SystemError.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  void close_noexcept() noexcept;

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace trainbox::metrics
