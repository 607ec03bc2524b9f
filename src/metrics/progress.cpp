#include <trainbox/metrics/progress.h>

#include <unistd.h>

#include <fmt/format.h>

namespace trainbox::metrics {

Progress::Mode Progress::parse_mode(const std::string& s) {
  if (s == "bar") return Mode::kBar;
  if (s == "lines") return Mode::kLines;
  if (s == "off") return Mode::kOff;
  return Mode::kAuto;
}

Progress::Progress(Mode mode, std::FILE* out) : mode_(mode), out_(out) {
  if (mode_ == Mode::kAuto) mode_ = isatty(fileno(out_)) ? Mode::kBar : Mode::kLines;
}

std::string Progress::format_duration(double s) {
  if (s < 0) return "?";
  auto t = static_cast<long long>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string Progress::format_rate(double r) {
  if (!(r > 0)) return "0";
  return r >= 100 ? fmt::format("{:.0f}", r) : fmt::format("{:.3g}", r);
}

void Progress::update(const ProgressState& s) {
  if (mode_ == Mode::kOff || mode_ == Mode::kQuiet) return;
  const std::string rate =
      s.tokens_per_s > 0 ? format_rate(s.tokens_per_s) + " tokens/s" : format_rate(s.samples_per_s) + " samples/s";
  if (mode_ == Mode::kLines) {
    fmt::print(out_, "epoch {}/{} batch {}/{} step {}{} loss {:.4f} lr {:.3g} {} ETA {}\n", s.epoch, s.epochs, s.batch,
               s.batches, s.step, s.steps > 0 ? fmt::format("/{}", s.steps) : std::string(), s.loss, s.lr, rate,
               format_duration(s.eta_s));
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 24;
  int filled = s.batches > 0 ? int(kWidth * s.batch / s.batches) : 0;
  std::string bar =
      std::string(filled, '=') + (filled < kWidth ? ">" : "") + std::string(std::max(0, kWidth - filled - 1), ' ');
  fmt::print(out_, "\r\033[Kepoch {}/{} [{}] {}/{} loss {:.4f} {} ETA {}", s.epoch, s.epochs, bar, s.batch, s.batches,
             s.loss, rate, format_duration(s.eta_s));
  std::fflush(out_);
  bar_open_ = true;
}

void Progress::note(const std::string& line) {
  if (mode_ == Mode::kQuiet) return;
  if (bar_open_) fmt::print(out_, "\r\033[K");
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);
  bar_open_ = false;
}

void Progress::finish_line() {
  if (bar_open_) fmt::print(out_, "\n");
  bar_open_ = false;
  std::fflush(out_);
}

}  // namespace trainbox::metrics
