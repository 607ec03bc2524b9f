// Tar reading and writing (trainbox/data/image/tar.h). Field offsets: POSIX.1-1988 ustar, with
// GNU's long names and base-256 sizes and POSIX.1-2001's pax records, as Python's tarfile
// reads them (Lib/tarfile.py, TarInfo.frombuf / _proc_pax / _proc_gnulong).
#include <trainbox/data/image/tar.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::data {

namespace {

// ustar header fields: offset, size.
constexpr std::size_t kName = 0, kNameLen = 100;
constexpr std::size_t kMode = 100, kUid = 108, kGid = 116, kIdLen = 8;
constexpr std::size_t kSize = 124, kSizeLen = 12;
constexpr std::size_t kMtime = 136, kMtimeLen = 12;
constexpr std::size_t kChksum = 148, kChksumLen = 8;
constexpr std::size_t kType = 156;
constexpr std::size_t kMagic = 257;
constexpr std::size_t kPrefix = 345, kPrefixLen = 155;
using Block = std::array<unsigned char, kTarBlock>;

constexpr char kGnuMagic[8] = {'u', 's', 't', 'a', 'r', ' ', ' ', '\0'};  // magic + version
constexpr char kPosixMagic[6] = {'u', 's', 't', 'a', 'r', '\0'};

std::uint64_t padded(std::uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

// A NUL-terminated field (Python's nts).
std::string_view field_text(const Block& b, std::size_t off, std::size_t len) {
  std::string_view s(reinterpret_cast<const char*>(b.data()) + off, len);
  return s.substr(0, s.find('\0'));
}

// An octal number field, or base-256 when its first byte has the high bit (GNU, sizes over
// 8 GiB). nullopt when it is neither, or negative, or over 2^63.
std::optional<std::uint64_t> numeric_field(const Block& b, std::size_t off, std::size_t len) {
  if (b[off] == 0x80) {
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < len; ++i) {
      if (v >> 55) return std::nullopt;
      v = (v << 8) | b[off + i];
    }
    return v;
  }
  if (b[off] & 0x80) return std::nullopt;  // 0xff: negative base-256
  std::string_view s = field_text(b, off, len);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '7' || (v >> 60)) return std::nullopt;
    v = v * 8 + std::uint64_t(c - '0');
  }
  return v;
}

bool all_zero(const Block& b) {
  return std::all_of(b.begin(), b.end(), [](unsigned char c) { return c == 0; });
}

// The header checksums Python accepts: the unsigned and the signed byte sum, the checksum
// field counted as spaces.
bool checksum_ok(const Block& b, std::uint64_t stored) {
  std::uint64_t u = 0;
  std::int64_t s = 0;
  for (std::size_t i = 0; i < kTarBlock; ++i) {
    const unsigned char c = i >= kChksum && i < kChksum + kChksumLen ? ' ' : b[i];
    u += c;
    s += static_cast<signed char>(c);
  }
  return stored == u || static_cast<std::int64_t>(stored) == s;
}

struct Pax {
  std::optional<std::string> path;
  std::optional<std::uint64_t> size;
};

// "LEN KEY=VALUE\n" records; nullopt-free: returns the error text, "" when fine.
std::string parse_pax(std::string_view data, Pax& pax) {
  std::size_t p = 0;
  while (p < data.size()) {
    if (data[p] == '\0') break;  // some writers pad the block with NULs
    std::size_t q = p;
    std::uint64_t len = 0;
    while (q < data.size() && data[q] >= '0' && data[q] <= '9' && len < kMaxTarExtendedHeader)
      len = len * 10 + std::uint64_t(data[q++] - '0');
    if (q == p || q >= data.size() || data[q] != ' ' || len < 5 || len > data.size() - p)
      return fmt::format("malformed pax record at byte {} of the extended header", p);
    const std::string_view rec = data.substr(p, len);
    if (rec.back() != '\n') return fmt::format("pax record at byte {} does not end in a newline", p);
    const std::string_view kv = rec.substr(q - p + 1, rec.size() - (q - p + 1) - 1);
    const std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) return fmt::format("pax record at byte {} has no key=value", p);
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "path") {
      pax.path = std::string(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return fmt::format("pax size '{}' is not a whole number", value);
      for (char c : value) v = v * 10 + std::uint64_t(c - '0');
      pax.size = v;
    }
    p += len;
  }
  return {};
}

}  // namespace

// --- reader ---

TarReader::TarReader(std::string path) : path_(std::move(path)) {
  fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_)
    throw DataError(fmt::format("cannot open tar shard {}: {}", path_, errno_text(errno)),
                    "check the shard pattern in data.path and that the files are readable");
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw DataError(fmt::format("tar shard {} is not a regular file", path_),
                    "data.path names tar files, e.g. shards/train-{000000..000127}.tar");
  file_size_ = static_cast<std::uint64_t>(st.st_size);
}

void TarReader::fail(std::uint64_t offset, const std::string& what) const {
  throw DataError(fmt::format("tar shard {}: {} (header at byte offset {})", path_, what, offset),
                  "the shard is damaged or not a tar file: re-create it (trainbox data pack) or re-download it");
}

void TarReader::read_at(std::uint64_t offset, void* dst, std::size_t n, std::uint64_t header) const {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_.get(), p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(header, fmt::format("read error at byte {}: {}", offset, errno_text(errno)));
    if (r == 0) fail(header, fmt::format("the file ends at byte {}, inside the member", offset));
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

std::string TarReader::read_extended(std::uint64_t offset, std::uint64_t size, std::uint64_t header) const {
  if (size > kMaxTarExtendedHeader)
    fail(header, fmt::format("extended header of {} bytes, more than the {} allowed", size, kMaxTarExtendedHeader));
  std::string s(size, '\0');
  read_at(offset, s.data(), s.size(), header);
  return s;
}

bool TarReader::next(TarMember& out) {
  std::optional<std::string> long_name;
  Pax pax;
  bool pending = false;  // an extended header waits for its member
  while (!done_) {
    const std::uint64_t at = pos_;
    if (file_size_ - std::min(at, file_size_) == 0) {
      if (pending) fail(at, "an extended header is not followed by a member: the file is truncated");
      done_ = true;
      break;
    }
    if (file_size_ - at < kTarBlock)
      fail(at, fmt::format("truncated header: {} bytes left, a header is {}", file_size_ - at, kTarBlock));
    Block b;
    read_at(at, b.data(), b.size(), at);
    if (all_zero(b)) {
      if (pending) fail(at, "an extended header is followed by the end-of-archive marker");
      done_ = true;
      break;
    }
    const auto chksum = numeric_field(b, kChksum, kChksumLen);
    if (!chksum || !checksum_ok(b, *chksum))
      fail(at, at == 0 ? "not a tar file: bad header checksum" : "bad header checksum");
    auto size = numeric_field(b, kSize, kSizeLen);
    if (!size) fail(at, fmt::format("size field '{}' is not an octal number", field_text(b, kSize, kSizeLen)));
    const char type = static_cast<char>(b[kType]);
    if (pax.size && type != 'x' && type != 'L') size = pax.size;
    const std::uint64_t data = at + kTarBlock;
    if (*size > file_size_ - data)
      fail(at, fmt::format("member of {} bytes runs past the end of the file ({} bytes)", *size, file_size_));
    // Directories, links and devices have no data whatever their size field says (tarfile.py).
    const bool has_data = !(type >= '1' && type <= '6');
    pos_ = data + (has_data ? padded(*size) : 0);
    switch (type) {
      case 'L':
        long_name = read_extended(data, *size, at);
        long_name->resize(std::min(long_name->size(), long_name->find('\0')));
        pending = true;
        continue;
      case 'x': {
        const std::string text = read_extended(data, *size, at);
        if (std::string why = parse_pax(text, pax); !why.empty()) fail(at, why);
        pending = true;
        continue;
      }
      case 'S': fail(at, "GNU sparse members are not supported");
      case '0':
      case '\0':
      case '7': break;
      default:  // directories, links, devices, 'g' global headers, 'K' long link names …
        long_name.reset();
        pax = {};
        pending = false;
        continue;
    }
    std::string name;
    if (pax.path) {
      name = *pax.path;
    } else if (long_name) {
      name = *long_name;
    } else {
      name = std::string(field_text(b, kName, kNameLen));
      const std::string_view prefix = field_text(b, kPrefix, kPrefixLen);
      if (!prefix.empty() && std::memcmp(b.data() + kMagic, kPosixMagic, sizeof kPosixMagic) == 0)
        name = std::string(prefix) + "/" + name;
    }
    if (type == '\0' && !name.empty() && name.back() == '/') {  // an old-style directory
      long_name.reset();
      pax = {};
      pending = false;
      continue;
    }
    out = TarMember{std::move(name), at, data, *size};
    return true;
  }
  return false;
}

void TarReader::read(const TarMember& m, std::vector<std::uint8_t>& out) const {
  if (m.offset > file_size_ || m.size > file_size_ - m.offset)
    fail(m.header_offset, fmt::format("member {} of {} bytes runs past the end of the file", m.name, m.size));
  out.resize(m.size);
  read_at(m.offset, out.data(), out.size(), m.header_offset);
}

std::vector<TarMember> list_tar(const std::string& path) {
  TarReader r(path);
  std::vector<TarMember> out;
  TarMember m;
  while (r.next(m)) out.push_back(std::move(m));
  return out;
}

// --- writer ---

std::uint64_t TarWriter::member_bytes(std::size_t name_size, std::uint64_t n) {
  const std::uint64_t long_name = name_size > kNameLen ? kTarBlock + padded(name_size + 1) : 0;
  return long_name + kTarBlock + padded(n);
}

void TarWriter::put(const void* data, std::size_t n) {
  if (n == 0) return;
  sink_(data, n);
  written_ += n;
}

void TarWriter::header(std::string_view name, char type, std::uint64_t size) {
  Block b{};
  std::memcpy(b.data() + kName, name.data(), std::min(name.size(), kNameLen));
  auto octal = [&](std::size_t off, std::size_t len, std::uint64_t v) {
    const std::string s = fmt::format("{:0{}o}", v, len - 1);  // digits and a NUL
    std::memcpy(b.data() + off, s.data(), s.size());
  };
  octal(kMode, kIdLen, 0644);
  octal(kUid, kIdLen, 0);
  octal(kGid, kIdLen, 0);
  if (size < (std::uint64_t(1) << 33)) {
    octal(kSize, kSizeLen, size);
  } else {  // base-256: 0x80, then big-endian
    b[kSize] = 0x80;
    for (std::size_t i = 0; i < 8; ++i) b[kSize + kSizeLen - 1 - i] = static_cast<unsigned char>(size >> (8 * i));
  }
  octal(kMtime, kMtimeLen, 0);
  b[kType] = static_cast<unsigned char>(type);
  std::memcpy(b.data() + kMagic, kGnuMagic, sizeof kGnuMagic);
  std::memset(b.data() + kChksum, ' ', kChksumLen);
  unsigned sum = 0;
  for (unsigned char c : b) sum += c;
  const std::string s = fmt::format("{:06o}", sum);
  std::memcpy(b.data() + kChksum, s.data(), 6);
  b[kChksum + 6] = '\0';
  put(b.data(), b.size());
}

void TarWriter::add(std::string_view name, const void* data, std::size_t n) {
  if (finished_) throw std::logic_error("TarWriter::add after finish");
  static const Block zeros{};
  if (name.size() > kNameLen) {  // GNU long name: a ././@LongLink member holding the name
    header("././@LongLink", 'L', name.size() + 1);
    put(name.data(), name.size());
    const std::uint64_t pad = padded(name.size() + 1) - name.size();
    put(zeros.data(), static_cast<std::size_t>(pad));
  }
  header(name, '0', n);
  put(data, n);
  put(zeros.data(), static_cast<std::size_t>(padded(n) - n));
}

void TarWriter::finish() {
  if (finished_) return;
  static const Block zeros{};
  put(zeros.data(), zeros.size());
  put(zeros.data(), zeros.size());
  finished_ = true;
}

}  // namespace trainbox::data
