// trainbox/util/clock.h — seconds as a double on the steady clock, and back: the one conversion
// each way that the rendezvous, the launcher and the trainer use for timeouts and rates.
// Torch-free, header-only, thread-safe (no state).
//
//   const auto started = SteadyClock::now();
//   if (SteadyClock::now() - started > seconds(cfg.rdzv.join_timeout_s)) …;   // a timeout given in seconds
//   const double wall_s = seconds_since(started);                             // 0.25
//   const double age_s = to_seconds(now - r.received);                         // a duration
#pragma once
#include <algorithm>
#include <chrono>

#include <trainbox/util/parse.h>

namespace trainbox {

using SteadyClock = std::chrono::steady_clock;

// A duration in seconds, as a double.
template <class Rep, class Period>
inline double to_seconds(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration<double>(d).count();
}

// Seconds from `t` until now (negative when `t` lies ahead).
inline double seconds_since(SteadyClock::time_point t) { return to_seconds(SteadyClock::now() - t); }

// The steady clock's reading in seconds: for differences of timestamps kept as doubles.
inline double now_seconds() { return to_seconds(SteadyClock::now().time_since_epoch()); }

// `s` seconds as a steady-clock duration, capped at kMaxSeconds (1e9 s, parse.h's limit for a
// value in seconds): now() + the result never overflows, even for a timeout meant as "never".
inline SteadyClock::duration seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(std::min(s, kMaxSeconds)));
}

}  // namespace trainbox
