#include <trainbox/launch/line_buffer.h>

namespace trainbox::launch {

std::vector<std::string> LineBuffer::feed(std::string_view data) {
  pending_.append(data);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (;;) {
    std::size_t end = pending_.find_first_of("\r\n", start);
    if (end == std::string::npos) {
      if (pending_.size() - start >= kMaxLine) {  // no terminator in sight: emit a piece
        lines.push_back(pending_.substr(start, kMaxLine) + "\n");
        start += kMaxLine;
        continue;
      }
      break;
    }
    if (pending_[end] == '\r') {
      if (end + 1 == pending_.size()) break;  // "\r" or "\r\n"? wait for the next byte
      if (pending_[end + 1] == '\n') ++end;   // "\r\n" is one terminator
    }
    lines.push_back(pending_.substr(start, end + 1 - start));
    start = end + 1;
  }
  pending_.erase(0, start);
  return lines;
}

std::optional<std::string> LineBuffer::finish() {
  if (pending_.empty()) return std::nullopt;
  std::string rest = std::move(pending_);
  pending_.clear();
  if (rest.back() != '\n') rest += '\n';  // a final '\r' too: the next writer must not overwrite it
  return rest;
}

}  // namespace trainbox::launch
