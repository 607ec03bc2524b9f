// Test helper: a fresh directory under $TMPDIR (else /tmp), removed with everything in it at
// scope exit. The one TempDir of the unit tests.
//
//   test::TempDir dir;
//   dir.write("a/b.txt", "text");              // creates a/
//   std::string p = dir / "x.safetensors";      // dir.path + "/x.safetensors"
//   EXPECT_EQ(dir.listing(), std::vector<std::string>{"a"});
#pragma once
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace trainbox::test {

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trainbox-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;  // a destructor must not throw
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& rel) const { return path + "/" + rel; }
  // Writes `text` to path/rel, creating parent directories.
  void write(const std::string& rel, const std::string& text) const {
    auto p = std::filesystem::path(path) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  // The names directly in the directory, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace trainbox::test
