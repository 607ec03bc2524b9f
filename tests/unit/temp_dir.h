// Test helper: a fresh directory under /tmp, removed with everything in it at scope exit.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace trainbox::test {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/trainbox-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `text` to path/rel, creating parent directories.
  void write(const std::string& rel, const std::string& text) const {
    auto p = std::filesystem::path(path) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
};

}  // namespace trainbox::test
