// attnkit._core — drawing: attnkit_viz's heatmap figure (PNG) and interactive page (HTML), for the head
// viewer (python/attnkit/heads.py), which computes the weights and statistics and lays them out.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit_viz/heatmap/figure.hpp"
#include "attnkit_viz/heatmap/html.hpp"
#include "attnkit_viz/picture_file.hpp"
#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attnkit::python {
namespace {

using cli::HeadWeights;
using cli::HeatmapFigure;
using cli::HeatmapPage;

// [panels, n, m], float32, C-contiguous: the Python side converts before calling.
using PanelWeights = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

HeadWeights head_weights(const PanelWeights& weights, const std::vector<std::int64_t>& heads) {
  HeadWeights w;
  const auto panels = static_cast<std::int64_t>(weights.shape(0));
  w.n = static_cast<std::int64_t>(weights.shape(1));
  w.m = static_cast<std::int64_t>(weights.shape(2));
  if (static_cast<std::int64_t>(heads.size()) != panels) {
    throw Error(ErrorCode::invalid_shape, "heads: " + std::to_string(heads.size()) + " head numbers for " +
                                              std::to_string(panels) + " panels of weights");
  }
  w.heads = heads;
  const float* data = weights.data();
  for (std::int64_t p = 0; p < panels; ++p) w.weights.emplace_back(data + p * w.n * w.m, data + (p + 1) * w.n * w.m);
  return w;
}

// Returns the picture's size in pixels.
std::pair<int, int> heatmap_png(const PanelWeights& weights, const std::string& path, const std::vector<std::int64_t>& heads,
                                std::string title, std::string source, std::vector<std::string> tokens,
                                std::vector<std::string> panel_titles, std::vector<std::vector<std::string>> captions,
                                int columns, int panel_side, bool outer_labels_only, std::optional<double> vmax,
                                const std::string& format_name) {
  HeatmapFigure figure;
  figure.weights = head_weights(weights, heads);
  figure.title = std::move(title);
  figure.source = std::move(source);
  figure.query_tokens = tokens;
  figure.key_tokens = std::move(tokens);
  figure.panel_titles = std::move(panel_titles);
  figure.captions = std::move(captions);
  figure.columns = columns;
  figure.panel_side = panel_side;
  figure.outer_labels_only = outer_labels_only;
  figure.vmax = vmax;
  figure.vmax_source = "the same scale for every head";
  nb::gil_scoped_release release;
  const viz::Canvas image = cli::render_figure(figure);
  // The format comes from the name the picture will have (format_name, when it is written under a
  // temporary name first), not from where it is written now.
  viz::write_picture(image, path, viz::picture_format(format_name.empty() ? path : format_name));
  return {image.width(), image.height()};
}

void heatmap_html(const PanelWeights& weights, const std::string& path, const std::vector<std::int64_t>& heads,
                  std::vector<std::int64_t> layers, std::string title, std::vector<std::string> tokens,
                  std::vector<std::string> head_names, std::vector<std::string> stat_names,
                  std::vector<std::vector<double>> stats, std::string stat_note) {
  HeatmapPage page;
  page.weights = head_weights(weights, heads);
  page.title = std::move(title);
  page.query_tokens = tokens;
  page.key_tokens = std::move(tokens);
  page.head_names = std::move(head_names);
  page.layers = std::move(layers);
  page.stat_names = std::move(stat_names);
  page.stats = std::move(stats);
  page.stat_note = std::move(stat_note);
  nb::gil_scoped_release release;
  cli::write_heatmap_html(page, path);
}

}  // namespace

void bind_drawing(nb::module_& m) {
  m.attr("has_drawing") = true;
  m.attr("max_html_weights") = cli::kMaxHtmlWeights;
  m.def("heatmap_png", &heatmap_png, "weights"_a, "path"_a, "heads"_a, "title"_a, "source"_a, "tokens"_a,
        "panel_titles"_a, "captions"_a, "columns"_a, "panel_side"_a, "outer_labels_only"_a, "vmax"_a.none(),
        "format_name"_a = "",
        "Draws [panels, n, m] weights as `attnkit heatmap`'s figure, PNG or PDF as format_name's (else path's) "
        "extension says; returns (width, height).");
  m.def("heatmap_html", &heatmap_html, "weights"_a, "path"_a, "heads"_a, "layers"_a, "title"_a, "tokens"_a,
        "head_names"_a, "stat_names"_a, "stats"_a, "stat_note"_a,
        "Writes [panels, n, m] weights as `attnkit heatmap --html`'s self-contained page.");
}

}  // namespace attnkit::python
