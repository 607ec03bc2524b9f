// trainbox/launch/line_buffer.h — cuts a worker's output stream into whole lines for the console.
//
// The launcher prefixes every console line with "[rank N] ", so it may only write whole lines:
// a partial line stays buffered until its end arrives or the stream closes (then it gets a
// '\n'), and two ranks never interleave inside one line. A line ends at '\n', "\r\n", or a
// lone '\r' — progress bars that redraw in place with '\r' keep working, each redraw prefixed.
// A '\r' that ends the data so far is held back until the next byte shows whether "\r\n"
// follows. Lines longer than kMaxLine are cut, so a stream without newlines cannot grow the
// buffer without bound. Not thread-safe; one LineBuffer per stream.
//
//   LineBuffer b;
//   for (auto& line : b.feed("a\nb")) write(1, line);   // "a\n"
//   if (auto rest = b.finish()) write(1, *rest);        // "b\n"
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::launch {

class LineBuffer {
 public:
  // 64 KiB: far beyond any log line, small enough that 8 ranks × 2 streams stay trivial.
  static constexpr std::size_t kMaxLine = 64 * 1024;

  // Appends `data`; returns the lines it completed, each with its terminator.
  std::vector<std::string> feed(std::string_view data);
  // The stream ended: the partial line, with '\n' appended, if there is one.
  std::optional<std::string> finish();
  bool empty() const { return pending_.empty(); }

 private:
  std::string pending_;
};

}  // namespace trainbox::launch
