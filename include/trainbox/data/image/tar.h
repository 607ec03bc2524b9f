// trainbox/data/image/tar.h — reading and writing tar files, the container of WebDataset shards.
// Torch-free (trainbox_core); the fuzz harness tests/fuzz/fuzz_tar.cpp runs the reader.
//
// TarReader walks one file's 512-byte headers with pread (no whole-file read: memory is one
// header plus at most kMaxTarExtendedHeader bytes of pax / GNU long-name data) and yields the
// regular files: ustar (with its 155-byte name prefix), GNU long names ('L'), pax extended
// headers ('x': path and size) and base-256 sizes. Directories, links, devices and global pax
// headers are skipped; GNU sparse files are refused. The end is two zero blocks, one zero
// block, or the end of the file at a header boundary (what Python's tarfile accepts).
// Every defect — a bad checksum, a size that is not octal, a member running past the end of
// the file, a truncated header, a malformed pax record — is a DataError naming the file and
// the byte offset of the header; each step moves forward by at least one block, so no input
// makes it loop. Not thread-safe; one reader per thread (read() is pread, so it does not
// disturb next()).
//
// TarWriter writes ustar members (GNU 'L' for names over 100 bytes, base-256 sizes over
// 8 GiB) to a sink, which the caller points at a file (trainbox data pack: io::AtomicFile).
//
//   TarReader tar("train-000000.tar");
//   TarMember m;
//   while (tar.next(m)) { std::vector<std::uint8_t> bytes; tar.read(m, bytes); }
//   TarWriter w([&](const void* p, std::size_t n) { file.write(p, n); });
//   w.add("000001.jpg", jpeg_bytes); w.finish();
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <trainbox/util/unique_fd.h>

namespace trainbox::data {

inline constexpr std::size_t kTarBlock = 512;
// The largest pax or GNU long-name payload read (a path is at most PATH_MAX = 4096 bytes).
inline constexpr std::uint64_t kMaxTarExtendedHeader = 1 << 20;

struct TarMember {
  std::string name;             // full path inside the archive, as Python's TarInfo.name
  std::uint64_t header_offset;  // where its (first) header starts: for messages
  std::uint64_t offset;         // where its data starts
  std::uint64_t size;           // data bytes
};

class TarReader {
 public:
  explicit TarReader(std::string path);  // DataError if it cannot be opened
  // The next regular file; false at the end of the archive.
  bool next(TarMember& out);
  // m's data into `out` (resized); DataError on a short read.
  void read(const TarMember& m, std::vector<std::uint8_t>& out) const;
  const std::string& path() const { return path_; }
  std::uint64_t file_size() const { return file_size_; }

 private:
  [[noreturn]] void fail(std::uint64_t offset, const std::string& what) const;
  void read_at(std::uint64_t offset, void* dst, std::size_t n, std::uint64_t header) const;
  std::string read_extended(std::uint64_t offset, std::uint64_t size, std::uint64_t header) const;

  std::string path_;
  UniqueFd fd_;
  std::uint64_t file_size_ = 0;
  std::uint64_t pos_ = 0;  // the next header
  bool done_ = false;
};

// Every regular file of `path` in order (TarReader::next until the end).
std::vector<TarMember> list_tar(const std::string& path);

class TarWriter {
 public:
  using Sink = std::function<void(const void* data, std::size_t n)>;
  explicit TarWriter(Sink sink) : sink_(std::move(sink)) {}
  // One regular file, mode 0644, mtime 0 (shards are reproducible byte for byte).
  void add(std::string_view name, const void* data, std::size_t n);
  void add(std::string_view name, std::string_view bytes) { add(name, bytes.data(), bytes.size()); }
  // The end-of-archive marker: two zero blocks. add() after finish() is a logic error.
  void finish();
  std::uint64_t bytes_written() const { return written_; }
  // What add(name, …, n) writes: headers, data and padding.
  static std::uint64_t member_bytes(std::size_t name_size, std::uint64_t n);

 private:
  void put(const void* data, std::size_t n);
  void header(std::string_view name, char type, std::uint64_t size);

  Sink sink_;
  std::uint64_t written_ = 0;
  bool finished_ = false;
};

}  // namespace trainbox::data
