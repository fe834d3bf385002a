// The page `attnkit heatmap --html` writes, as text: the data block cannot be escaped from, sizes
// are checked, and too large a page is refused naming --heads. (python/tests/test_heatmap_page.py
// loads it in a browser.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit_viz/heatmap/html.hpp"

namespace attnkit::cli {
namespace {

HeatmapPage small_page() {
  HeatmapPage page;
  page.title = "title </script><script>alert(1)</script>";
  page.weights.n = 2;
  page.weights.m = 3;
  page.weights.heads = {4};
  page.query_tokens = {"</script>", "a\"b\\c"};
  page.key_tokens = {"x", "y\xE2\x80\xA8z", "<!--"};
  page.weights.weights = {{0.25f, 0.75f, 0.0f, 0.125f, 0.375f, 0.5f}};
  return page;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(HeatmapHtml, TokensAndTitleCannotCloseTheDataBlock) {
  const std::string html = heatmap_html(small_page());
  EXPECT_EQ(count(html, "</script>"), 2u);  // the data block's and the script's own
  EXPECT_EQ(count(html, "<script"), 2u);
  EXPECT_EQ(count(html, "<!--"), 0u);
  EXPECT_NE(html.find(R"("\u003c/script\u003e","a\"b\\c")"), std::string::npos);
  EXPECT_NE(html.find(R"("y\u2028z")"), std::string::npos);
  EXPECT_NE(html.find(R"("weights":[[0.25,0.75,0,0.125,0.375,0.5]])"), std::string::npos);
  EXPECT_NE(html.find(R"("heads":[4])"), std::string::npos);
}

TEST(HeatmapHtml, PositionsLabelTheAxesWithoutTokens) {
  HeatmapPage page = small_page();
  page.query_tokens.clear();
  page.key_tokens.clear();
  const std::string html = heatmap_html(page);
  EXPECT_NE(html.find(R"("queries":["0","1"],"keys":["0","1","2"])"), std::string::npos);
}

TEST(HeatmapHtml, LayersAndStatisticsAreWrittenAndChecked) {
  HeatmapPage page = small_page();
  page.weights.heads = {0, 1};
  page.weights.weights.push_back(page.weights.weights[0]);
  page.layers = {3, 3};
  page.stat_names = {"previous token", "[SEP]"};
  page.stats = {{0.5, 0.25}, {1.0 / 3.0, std::nan("")}};
  page.stat_note = "means over </script> queries";
  const std::string html = heatmap_html(page);
  EXPECT_NE(html.find(R"("layers":[3,3],"statNames":["previous token","[SEP]"],"stats":[[0.5,0.25],[0.3333333,null]])"),
            std::string::npos);
  EXPECT_NE(html.find(R"("statNote":"means over \u003c/script\u003e queries")"), std::string::npos);
  EXPECT_EQ(count(html, "</script>"), 2u);

  HeatmapPage wrong = page;
  wrong.layers = {3};
  EXPECT_THROW(heatmap_html(wrong), Error);
  wrong = page;
  wrong.stats.pop_back();
  EXPECT_THROW(heatmap_html(wrong), Error);
  wrong = page;
  wrong.stats[1].pop_back();
  EXPECT_THROW(heatmap_html(wrong), Error);
  wrong = page;
  wrong.stat_names.clear();
  EXPECT_THROW(heatmap_html(wrong), Error);
}

TEST(HeatmapHtml, WrongSizesAndTooLargePagesAreRefused) {
  HeatmapPage page = small_page();
  page.key_tokens.pop_back();
  EXPECT_THROW(heatmap_html(page), Error);
  page = small_page();
  page.weights.weights[0].pop_back();
  EXPECT_THROW(heatmap_html(page), Error);
  page = small_page();
  page.weights.n = page.weights.m = 1500;
  page.query_tokens.clear();
  page.key_tokens.clear();
  page.weights.heads = {0, 1};
  page.weights.weights.assign(2, std::vector<float>(1500 * 1500, 0.0f));
  try {
    heatmap_html(page);
    FAIL() << "a 4.5-million-weight page was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("--heads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1500"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnkit::cli
