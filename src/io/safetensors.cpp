#include <trainbox/io/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <trainbox/io/atomic_file.h>
#include <trainbox/util/errors.h>

namespace trainbox::io {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, kDTypeCount> kDTypes{{
    {DType::kF64, "F64", 8},
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
}};
static_assert(static_cast<std::size_t>(DType::kBool) + 1 == kDTypeCount, "kDTypes must list every DType");
constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kDTypes.size(); ++i)
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_enum_order());

// Valid in the format, but no DType here (unsigned wider than a byte, complex, fp8).
constexpr std::array<std::string_view, 7> kUnsupportedDTypes{"U16",     "U32",     "U64",    "C64",
                                                             "F8_E5M2", "F8_E4M3", "F8_E8M0"};

// The reference implementation's limit (safetensors/src/tensor.rs MAX_HEADER_SIZE): a header
// that large is a corrupt size field, and reading it would allocate that much.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

std::string supported_dtype_list() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// product(shape) * elem_size, or false on overflow.
bool byte_count(const std::vector<std::int64_t>& shape, std::size_t elem_size, std::uint64_t* out) {
  std::uint64_t n = elem_size;
  for (std::int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return false;
  *out = n;
  return true;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

std::string_view dtype_name(DType dtype) { return kDTypes.at(static_cast<std::size_t>(dtype)).name; }
std::size_t dtype_size(DType dtype) { return kDTypes.at(static_cast<std::size_t>(dtype)).size; }

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // --- validate and build the header (nothing touches the disk before this succeeds) ---
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    if (t.name.empty()) throw UsageError(fmt::format("write_safetensors({}): a tensor has an empty name", path));
    if (t.name == kMetadataKey)
      throw UsageError(fmt::format("write_safetensors({}): tensor name \"{}\" is reserved for metadata", path, t.name));
    if (!names.insert(t.name).second)
      throw UsageError(fmt::format("write_safetensors({}): duplicate tensor name \"{}\"", path, t.name));
    if (static_cast<std::size_t>(t.dtype) >= kDTypeCount)
      throw UsageError(fmt::format("write_safetensors({}): tensor \"{}\" has an invalid dtype value {}", path, t.name,
                                   static_cast<int>(t.dtype)));
    std::uint64_t expected = 0;
    if (!byte_count(t.shape, dtype_size(t.dtype), &expected))
      throw UsageError(
          fmt::format("write_safetensors({}): tensor \"{}\" has an invalid shape {} (negative or overflowing)", path,
                      t.name, shape_text(t.shape)));
    if (expected != t.nbytes)
      throw UsageError(fmt::format("write_safetensors({}): tensor \"{}\" is {} {} = {} bytes, but nbytes is {}", path,
                                   t.name, dtype_name(t.dtype), shape_text(t.shape), expected, t.nbytes));
    if (t.data == nullptr && t.nbytes > 0)
      throw UsageError(fmt::format("write_safetensors({}): tensor \"{}\" has no data", path, t.name));
    header[t.name] =
        nlohmann::ordered_json{{"dtype", dtype_name(t.dtype)},
                               {"shape", t.shape},
                               {"data_offsets", nlohmann::ordered_json::array({offset, offset + t.nbytes})}};
    offset += t.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error& e) {  // 316: a name or metadata string is not UTF-8
    throw UsageError(fmt::format("write_safetensors({}): names and metadata must be UTF-8: {}", path, e.what()));
  }
  // Spaces up to a multiple of 8, as the reference writer does: with the 8-byte size field in
  // front, every tensor's data then starts at an 8-aligned file offset (mmap-friendly).
  text.append((8 - text.size() % 8) % 8, ' ');
  std::array<unsigned char, 8> size_le{};
  for (int i = 0; i < 8; ++i) size_le[i] = static_cast<unsigned char>((std::uint64_t{text.size()} >> (8 * i)) & 0xFF);

  // --- write atomically ---
  AtomicFile tmp(path, "safetensors file");
  tmp.write(size_le.data(), size_le.size());
  tmp.write(text.data(), text.size());
  for (const TensorView& t : tensors) tmp.write(t.data, t.nbytes);
  tmp.commit();
}

namespace {

DataError bad_file(const std::string& path, const std::string& problem) {
  return DataError(fmt::format("{}: invalid safetensors file: {}", path, problem),
                   "the file is truncated or not a safetensors file; write or download it again");
}

struct HeaderBytes {
  std::string text;             // the JSON header
  std::uint64_t buffer_size{};  // the bytes after it
};

// The 8-byte size field and the header it announces, checked against the file's size.
HeaderBytes read_header_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(fmt::format("cannot open safetensors file {}: {}", path, errno_text(errno)));
  struct stat st {};
  std::array<unsigned char, 8> size_le{};
  std::string text;
  std::string io_error;
  if (::fstat(fd, &st) != 0) {
    io_error = errno_text(errno);
  } else if (st.st_size >= 8 && ::pread(fd, size_le.data(), 8, 0) != 8) {
    io_error = errno_text(errno);
  }
  const std::uint64_t file_size = io_error.empty() ? static_cast<std::uint64_t>(st.st_size) : 0;
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{size_le[i]} << (8 * i);
  if (io_error.empty() && file_size >= 8 && n <= kMaxHeaderBytes && n <= file_size - 8) {
    text.resize(n);
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, text.data() + got, n - got, static_cast<off_t>(8 + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        io_error = r < 0 ? errno_text(errno) : "unexpected end of file";
        break;
      }
      got += static_cast<std::size_t>(r);
    }
  }
  ::close(fd);
  if (!io_error.empty()) throw DataError(fmt::format("cannot read safetensors file {}: {}", path, io_error));
  if (file_size < 8)
    throw bad_file(path, fmt::format("{} bytes long, too short for the 8-byte header size", file_size));
  if (n > kMaxHeaderBytes) throw bad_file(path, fmt::format("header size {} exceeds the 100 MB limit", n));
  if (n > file_size - 8)
    throw bad_file(path, fmt::format("header size {} but only {} bytes follow the size field", n, file_size - 8));
  if (n == 0 || text[0] != '{') throw bad_file(path, "header does not start with '{'");
  return {std::move(text), file_size - 8 - n};
}

// One tensor's entry of the header, checked: dtype, shape, and offsets inside the data buffer.
SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::ordered_json& info,
                             std::uint64_t buffer_size) {
  auto bad = [&](const std::string& problem) { return bad_file(path, problem); };
  const std::string where = fmt::format("tensor \"{}\"", name);
  if (!info.is_object()) throw bad(where + " is not an object");
  const auto dt = info.find("dtype"), sh = info.find("shape"), off = info.find("data_offsets");
  if (dt == info.end() || !dt->is_string()) throw bad(where + ": missing string \"dtype\"");
  if (sh == info.end() || !sh->is_array()) throw bad(where + ": missing array \"shape\"");
  if (off == info.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    throw bad(where + ": \"data_offsets\" is not [begin, end] with non-negative integers");

  SafetensorsEntry e{name, DType::kF32, {}, (*off)[0].get<std::uint64_t>(), (*off)[1].get<std::uint64_t>()};
  const auto dtype_str = dt->get<std::string>();
  const auto known =
      std::find_if(kDTypes.begin(), kDTypes.end(), [&](const DTypeInfo& d) { return d.name == dtype_str; });
  if (known == kDTypes.end()) {
    const bool valid =
        std::find(kUnsupportedDTypes.begin(), kUnsupportedDTypes.end(), dtype_str) != kUnsupportedDTypes.end();
    throw bad(fmt::format("{}: dtype \"{}\" is {} (supported: {})", where, dtype_str,
                          valid ? "not supported by trainbox" : "unknown", supported_dtype_list()));
  }
  e.dtype = known->dtype;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      throw bad(fmt::format("{}: shape {} must hold non-negative integers", where, sh->dump()));
    e.shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
  }
  std::uint64_t expected = 0;
  if (!byte_count(e.shape, known->size, &expected)) throw bad(fmt::format("{}: shape {} overflows", where, sh->dump()));
  if (e.begin > e.end) throw bad(fmt::format("{}: data_offsets [{}, {}] end before they begin", where, e.begin, e.end));
  if (e.end - e.begin != expected)
    throw bad(fmt::format("{}: {} {} needs {} bytes but data_offsets [{}, {}] hold {}", where, dtype_str,
                          shape_text(e.shape), expected, e.begin, e.end, e.end - e.begin));
  if (e.end > buffer_size)
    throw bad(fmt::format("{}: data_offsets [{}, {}] run past the end of the {}-byte data buffer (truncated file?)",
                          where, e.begin, e.end, buffer_size));
  return e;
}

// The entries must tile the data buffer exactly: no gap, no overlap, nothing after the last.
void check_tiling(const std::string& path, std::vector<SafetensorsEntry>& entries, std::uint64_t buffer_size) {
  std::stable_sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  std::uint64_t next = 0;
  for (const auto& e : entries) {
    if (e.begin > next)
      throw bad_file(path, fmt::format("bytes [{}, {}) of the data buffer belong to no tensor (before \"{}\")", next,
                                       e.begin, e.name));
    if (e.begin < next)
      throw bad_file(path, fmt::format("tensor \"{}\" at [{}, {}) overlaps the previous tensor, which ends at {}",
                                       e.name, e.begin, e.end, next));
    next = e.end;
  }
  if (next != buffer_size)
    throw bad_file(path, fmt::format("bytes [{}, {}) of the data buffer belong to no tensor (after the last one)", next,
                                     buffer_size));
}

}  // namespace

std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path,
                                                      std::map<std::string, std::string>* metadata) {
  const HeaderBytes bytes = read_header_bytes(path);
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(bytes.text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e999 (fuzz_safetensors)
    throw bad_file(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) throw bad_file(path, "header is not a JSON object");

  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name != kMetadataKey) {
      entries.push_back(parse_entry(path, name, info, bytes.buffer_size));
      continue;
    }
    if (!info.is_object()) throw bad_file(path, "\"__metadata__\" is not an object");
    for (const auto& [k, v] : info.items())
      if (!v.is_string()) throw bad_file(path, fmt::format("\"__metadata__\" value for \"{}\" is not a string", k));
    if (metadata != nullptr) {
      metadata->clear();
      for (const auto& [k, v] : info.items()) (*metadata)[k] = v.get<std::string>();
    }
  }
  check_tiling(path, entries, bytes.buffer_size);
  return entries;
}

}  // namespace trainbox::io
