// A progress bar for commands that take more than a second (lab, bench): one line on a terminal,
// redrawn in place, showing the fraction done, the time elapsed and the estimated time left.
// Nothing at all is written when the stream is not a terminal, so piped or redirected output
// (and --json) stays clean.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>

namespace attnkit::cli {

// True when `stream` is std::cout, std::cerr or std::clog and its file descriptor is a terminal;
// false for every other stream (string streams, files).
bool is_terminal(const std::ostream& stream);

// "label [=========>          ]  48%  0:03 elapsed, ETA 0:04", padded or cut to `width` columns.
std::string progress_line(const std::string& label, double fraction, double elapsed_seconds, int width);

class ProgressBar {
 public:
  struct Options {
    bool force = false;           // draw even when the stream is not a terminal (tests)
    double delay_seconds = 1.0;   // nothing is drawn before this: quick work shows no bar
    double redraw_seconds = 0.1;  // at most ten redraws a second
    int width = 79;               // columns of the line
  };

  ProgressBar(std::ostream& stream, std::string label, double total);
  ProgressBar(std::ostream& stream, std::string label, double total, Options options);
  ~ProgressBar();  // clears the line, as finish() does
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(double units);  // `units` more of `total` are done
  void finish();               // erases the bar, so the command's own output starts on a clean line

 private:
  using Clock = std::chrono::steady_clock;
  double seconds_since(Clock::time_point t) const;

  std::ostream& stream_;
  std::string label_;
  double total_, done_ = 0;
  Options options_;
  bool enabled_, drawn_ = false;
  Clock::time_point start_, last_draw_;
};

}  // namespace attnkit::cli
