// trainbox/io/sha256.h — SHA-256 of a string or a file, as 64 lowercase hex digits.
//
// Checkpoint manifests record each file's digest (train/checkpoint.h says why SHA-256 from
// OpenSSL's libcrypto: it is on every Linux machine and uses the CPU's SHA extensions,
// ~1.5 GB/s on one core). Files are streamed in 1 MiB pieces, never read whole. Pure
// functions, thread-safe; OpenSSL failures throw SystemError, file errors come back as errno.
//
//   std::string hex = io::sha256_hex("text");            // "982d9e3e…"
//   io::FileDigest d = io::sha256_file(path, /*sync=*/true);
//   if (d.err) throw FileWriteError("cannot read back " + path, d.err);
#pragma once
#include <cstdint>
#include <string>

namespace trainbox::io {

std::string sha256_hex(const std::string& data);

struct FileDigest {
  std::uint64_t bytes = 0;
  std::string sha256;  // 64 hex digits; empty when err != 0
  int err = 0;         // errno of a failed open, read or fsync; 0 = ok
};
// Streams the file through SHA-256; with `sync`, fsyncs it as well (a checkpoint save: the
// bytes just hashed are the bytes made durable).
FileDigest sha256_file(const std::string& path, bool sync);

// Whether `s` looks like a digest: 64 lowercase hex digits.
bool is_sha256_hex(const std::string& s);

}  // namespace trainbox::io
