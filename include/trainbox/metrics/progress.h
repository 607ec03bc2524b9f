// trainbox/metrics/progress.h — training progress for people: a bar redrawn in place on a
// terminal, or one plain line per report when output goes to a file or a pipe.
//
//   Progress p(Progress::Mode::kAuto, total_steps_in_epoch);
//   p.update({.epoch = 1, .epochs = 10, .step = 120, .steps = 9380, .loss = 0.41, .samples_per_s = 9e4});
//   p.finish_line();
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace trainbox::metrics {

struct ProgressState {
  std::int64_t epoch = 0, epochs = 0;   // 1-based epoch
  std::int64_t batch = 0, batches = 0;  // position in the epoch
  std::int64_t step = 0;                // optimizer steps so far
  std::int64_t steps = 0;               // the step the run stops at (train.max_steps or the last epoch's); 0 = unknown
  double loss = 0, lr = 0, samples_per_s = 0, eta_s = -1;
  double tokens_per_s = 0;  // > 0 for a sequence model: shown instead of samples/s (the summary's unit)
};

class Progress {
 public:
  // kOff: no periodic progress, but notes (start, epoch results, resume) still print.
  // kQuiet: nothing at all.
  enum class Mode { kAuto, kBar, kLines, kOff, kQuiet };
  static Mode parse_mode(const std::string& s);  // "auto" | "bar" | "lines" | "off"
  explicit Progress(Mode mode, std::FILE* out = stderr);

  void update(const ProgressState& s);  // bar: redraw; lines: print a line
  void note(const std::string& line);   // a line that stays (clears the bar first)
  void finish_line();                   // end the bar's line
  bool is_bar() const { return mode_ == Mode::kBar; }

  static std::string format_duration(double seconds);  // "1:02:03", "4:05"
  // A rate with the digits that matter: whole numbers from 100 up ("12500"), else three
  // significant digits ("63.2", "0.0314"): a slow step is never shown as "0".
  static std::string format_rate(double per_s);

 private:
  Mode mode_;
  std::FILE* out_;
  bool bar_open_ = false;
};

}  // namespace trainbox::metrics
