#include <trainbox/util/heartbeat.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace trainbox {

Heartbeat::Heartbeat(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (::ftruncate(fd, kHeartbeatBytes) == 0) {
    void* p = ::mmap(nullptr, kHeartbeatBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) map_ = static_cast<char*>(p);
  }
  ::close(fd);  // the mapping keeps the file
}

Heartbeat::~Heartbeat() {
  if (map_) ::munmap(map_, kHeartbeatBytes);
}

void Heartbeat::beat(std::int64_t step, std::string_view phase) {
  step_ = step;
  if (!map_) return;
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  char line[kHeartbeatBytes];
  int n = std::snprintf(line, sizeof line, "%lld %.*s %lld", static_cast<long long>(step),
                        static_cast<int>(std::min<std::size_t>(phase.size(), 32)), phase.data(),
                        static_cast<long long>(ms));
  n = std::max(0, std::min(n, static_cast<int>(kHeartbeatBytes) - 1));
  std::memset(line + n, ' ', kHeartbeatBytes - 1 - n);
  line[kHeartbeatBytes - 1] = '\n';
  std::memcpy(map_, line, kHeartbeatBytes);
}

Heartbeat& heartbeat() {
  static Heartbeat hb = [] {
    const char* p = std::getenv(kHeartbeatEnv);
    return p && *p ? Heartbeat(p) : Heartbeat();
  }();
  return hb;
}

std::optional<HeartbeatRecord> parse_heartbeat(std::string_view text) {
  if (auto nl = text.find('\n'); nl != std::string_view::npos) text = text.substr(0, nl);
  HeartbeatRecord r;
  std::size_t i = 0;
  auto number = [&](std::int64_t& out) {
    const std::size_t b = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (i == b || i - b > 18) return false;
    out = std::stoll(std::string(text.substr(b, i - b)));
    return true;
  };
  if (!number(r.step) || i >= text.size() || text[i++] != ' ') return std::nullopt;
  const std::size_t b = i;
  while (i < text.size() && (std::islower(static_cast<unsigned char>(text[i])) || text[i] == '_')) ++i;
  if (i == b || i >= text.size() || text[i++] != ' ') return std::nullopt;
  r.phase = std::string(text.substr(b, i - 1 - b));
  if (!number(r.unix_ms)) return std::nullopt;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i != text.size()) return std::nullopt;
  return r;
}

}  // namespace trainbox
