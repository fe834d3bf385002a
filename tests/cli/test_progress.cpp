// The progress bar: silent unless the stream is a terminal, and what its line says when it draws.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "progress.hpp"

namespace {

using attnkit::cli::ProgressBar;
using attnkit::cli::progress_line;

TEST(Progress, SilentWhenNotATerminal) {
  std::ostringstream out;
  EXPECT_FALSE(attnkit::cli::is_terminal(out));
  {
    ProgressBar bar(out, "work", 10, {.delay_seconds = 0, .redraw_seconds = 0});
    for (int i = 0; i < 10; ++i) bar.advance(1);
  }
  EXPECT_TRUE(out.str().empty()) << out.str();
}

TEST(Progress, DrawsFractionElapsedAndEtaThenClears) {
  std::ostringstream out;
  {
    ProgressBar bar(out, "work", 4, {.force = true, .delay_seconds = 0, .redraw_seconds = 0, .width = 60});
    bar.advance(1);
    bar.advance(1);
    const std::string drawn = out.str();
    EXPECT_EQ(drawn.front(), '\r');
    EXPECT_NE(drawn.find(" 25%"), std::string::npos) << drawn;
    EXPECT_NE(drawn.find(" 50%"), std::string::npos) << drawn;
    EXPECT_NE(drawn.find("elapsed, ETA 0:00"), std::string::npos) << drawn;
    bar.finish();
    const std::string cleared = out.str().substr(drawn.size());
    EXPECT_EQ(cleared, "\r" + std::string(60, ' ') + "\r");
    bar.advance(1);  // nothing after finish
    EXPECT_EQ(out.str().size(), drawn.size() + cleared.size());
  }
}

TEST(Progress, WaitsBeforeDrawing) {
  std::ostringstream out;
  ProgressBar bar(out, "work", 4, {.force = true, .delay_seconds = 60});
  bar.advance(2);
  EXPECT_TRUE(out.str().empty());
}

TEST(Progress, LineLayout) {
  const std::string half = progress_line("lab", 0.5, 10, 50);
  EXPECT_EQ(half.size(), 50u);
  EXPECT_EQ(half.substr(0, 5), "lab [");
  EXPECT_NE(half.find(" 50%  0:10 elapsed, ETA 0:10"), std::string::npos) << half;
  const std::string start = progress_line("lab", 0, 0, 50);
  EXPECT_NE(start.find("  0%"), std::string::npos);
  EXPECT_NE(start.find("ETA ?"), std::string::npos) << start;
  const std::string done = progress_line("lab", 1, 3725, 70);
  EXPECT_NE(done.find("100%  1:02:05 elapsed, ETA 0:00"), std::string::npos) << done;
  EXPECT_EQ(done.find('>'), std::string::npos);  // a full bar has no head
  // The bar fills in proportion: a quarter done fills a quarter of it.
  const std::string quarter = progress_line("x", 0.25, 1, 60);
  const std::size_t open = quarter.find('['), close = quarter.find(']');
  const auto filled = static_cast<double>(quarter.find('>') - open - 1);
  EXPECT_NEAR(filled / static_cast<double>(close - open - 1), 0.25, 0.05) << quarter;
}

}  // namespace
