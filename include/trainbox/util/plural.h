// trainbox/util/plural.h — a count and its noun for messages: "1 step", "2 steps", "0 epochs".
//
// Its own header, not strings.h: the start line and the done line use it, and strings.h is
// included by most of the tree.
//
//   note(fmt::format("{}/epoch, {}", plural(per_epoch, "step"), plural(epochs, "epoch")));
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace trainbox {

// English plurals in -s, which every noun these messages count takes.
inline std::string plural(std::int64_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

}  // namespace trainbox
