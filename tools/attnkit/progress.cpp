// The progress bar: terminal detection, the line's text, and throttled redraws.
#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace attnkit::cli {

namespace {

std::string clock_text(double seconds) {
  const auto total = static_cast<long>(std::max(0.0, std::round(seconds)));
  char buffer[32];
  if (total >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld", total / 60, total % 60);
  }
  return buffer;
}

}  // namespace

bool is_terminal(const std::ostream& stream) {
  int fd = -1;
  if (&stream == &std::cout) fd = STDOUT_FILENO;
  if (&stream == &std::cerr || &stream == &std::clog) fd = STDERR_FILENO;
  return fd >= 0 && isatty(fd) == 1;
}

std::string progress_line(const std::string& label, double fraction, double elapsed_seconds, int width) {
  fraction = std::clamp(std::isfinite(fraction) ? fraction : 0.0, 0.0, 1.0);
  char percent[8];
  std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(fraction * 100));
  // The ETA assumes the remaining work goes at the rate so far; unknown until something is done.
  const std::string eta = fraction > 0 ? clock_text(elapsed_seconds * (1 - fraction) / fraction) : "?";
  const std::string tail = std::string(" ") + percent + "  " + clock_text(elapsed_seconds) + " elapsed, ETA " + eta;

  constexpr int kMinBar = 10;  // below this the bar says nothing; the numbers still do
  const int bar = std::max(kMinBar, width - static_cast<int>(label.size() + tail.size()) - 3);
  const int filled = static_cast<int>(fraction * bar);
  std::string line = label + " [" + std::string(static_cast<std::size_t>(filled), '=');
  if (filled < bar) line += '>' + std::string(static_cast<std::size_t>(bar - filled - 1), ' ');
  line += "]" + tail;
  line.resize(static_cast<std::size_t>(std::max(width, 0)), ' ');
  return line;
}

ProgressBar::ProgressBar(std::ostream& stream, std::string label, double total)
    : ProgressBar(stream, std::move(label), total, Options{}) {}

ProgressBar::ProgressBar(std::ostream& stream, std::string label, double total, Options options)
    : stream_(stream), label_(std::move(label)), total_(total), options_(options),
      enabled_(options.force || is_terminal(stream)), start_(Clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

double ProgressBar::seconds_since(Clock::time_point t) const {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void ProgressBar::advance(double units) {
  done_ += units;
  if (!enabled_) return;
  const double elapsed = seconds_since(start_);
  if (elapsed < options_.delay_seconds) return;
  if (drawn_ && seconds_since(last_draw_) < options_.redraw_seconds) return;
  // '\r' returns to the start of the line, so each draw overwrites the last.
  stream_ << '\r' << progress_line(label_, total_ > 0 ? done_ / total_ : 1.0, elapsed, options_.width) << std::flush;
  drawn_ = true;
  last_draw_ = Clock::now();
}

void ProgressBar::finish() {
  enabled_ = false;  // a finished bar stays finished
  if (!drawn_) return;
  stream_ << '\r' << std::string(static_cast<std::size_t>(options_.width), ' ') << '\r' << std::flush;
  drawn_ = false;
}

}  // namespace attnkit::cli
