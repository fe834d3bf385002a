// attnkit heatmap --html: the page is written as a template with the data embedded as JSON (in a
// <script type="application/json"> block, so the browser never evaluates it) and a small script
// that draws from it. The colour map is sampled from viz::colormap, so the page and the PNG agree.
#include "attnkit_viz/heatmap/html.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

#include "attnkit/error.hpp"
#include "attnkit_viz/colormap.hpp"

namespace attnkit::cli {
namespace {

// A JSON string literal that is also safe inside <script>: '<' is escaped so "</script>" in a
// token cannot close the block, and U+2028/2029 (valid JSON, not valid JavaScript before ES2019).
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else if (c == 0xE2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x80 &&
                   (static_cast<unsigned char>(text[i + 2]) == 0xA8 || static_cast<unsigned char>(text[i + 2]) == 0xA9)) {
          out += static_cast<unsigned char>(text[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
          i += 2;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void append_labels(std::string& out, const std::vector<std::string>& labels, std::int64_t count) {
  out += '[';
  for (std::int64_t i = 0; i < count; ++i) {
    if (i > 0) out += ',';
    append_json_string(out, labels.empty() ? std::to_string(i) : labels[static_cast<std::size_t>(i)]);
  }
  out += ']';
}

// Weights with 7 significant digits: what float32 holds, and what the page shows on hover. JSON has
// no NaN or infinity: those are written as null (the page shows "n/a").
void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.7g", value);
  out += buffer;
}

void append_integers(std::string& out, const std::vector<std::int64_t>& values) {
  out += '[';
  for (std::size_t i = 0; i < values.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(values[i]);
  out += ']';
}

// An array of arrays of numbers: a matrix per head, or a row of statistics per head.
template <typename T>
void append_rows(std::string& out, const std::vector<std::vector<T>>& rows) {
  out += '[';
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out += r > 0 ? ",[" : "[";
    for (std::size_t e = 0; e < rows[r].size(); ++e) {
      if (e > 0) out += ',';
      append_number(out, rows[r][e]);
    }
    out += ']';
  }
  out += ']';
}

std::string page_data(const HeatmapPage& page) {
  std::string out = "{\"title\":";
  append_json_string(out, page.title);
  out += ",\"queries\":";
  append_labels(out, page.query_tokens, page.weights.n);
  out += ",\"keys\":";
  append_labels(out, page.key_tokens, page.weights.m);
  out += ",\"heads\":";
  append_integers(out, page.weights.heads);
  out += ",\"names\":";
  append_labels(out, page.head_names, page.head_names.empty() ? 0 : static_cast<std::int64_t>(page.weights.heads.size()));
  out += ",\"weights\":";
  append_rows(out, page.weights.weights);
  out += ",\"layers\":";
  append_integers(out, page.layers);
  out += ",\"statNames\":";
  append_labels(out, page.stat_names, static_cast<std::int64_t>(page.stat_names.size()));
  out += ",\"stats\":";
  append_rows(out, page.stats);
  out += ",\"statNote\":";
  append_json_string(out, page.stat_note);
  out += ",\"colormap\":[";
  for (int i = 0; i < 256; ++i) {
    const viz::Rgb c = viz::colormap(i / 255.0);
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "%s\"#%02x%02x%02x\"", i > 0 ? "," : "", c.r, c.g, c.b);
    out += buffer;
  }
  out += "]}";
  return out;
}

void check(const HeatmapPage& page) {
  const auto fail = [](const std::string& message) { throw Error(ErrorCode::invalid_argument, message); };
  if (page.weights.weights.size() != page.weights.heads.size()) fail("--html: one weight matrix per head");
  if (!page.head_names.empty() && page.head_names.size() != page.weights.heads.size()) fail("--html: one name per head");
  for (const auto& w : page.weights.weights) {
    if (static_cast<std::int64_t>(w.size()) != page.weights.n * page.weights.m) fail("--html: a head's weights are not [n, m]");
  }
  if (!page.query_tokens.empty() && static_cast<std::int64_t>(page.query_tokens.size()) != page.weights.n) {
    fail("--html: " + std::to_string(page.query_tokens.size()) + " query labels for n = " + std::to_string(page.weights.n));
  }
  if (!page.key_tokens.empty() && static_cast<std::int64_t>(page.key_tokens.size()) != page.weights.m) {
    fail("--html: " + std::to_string(page.key_tokens.size()) + " key labels for m = " + std::to_string(page.weights.m));
  }
  if (!page.layers.empty() && page.layers.size() != page.weights.heads.size()) fail("--html: one layer number per head");
  if (page.stats.size() != (page.stat_names.empty() ? 0 : page.weights.heads.size())) {
    fail("--html: " + std::to_string(page.stats.size()) + " rows of statistics for " +
         std::to_string(page.weights.heads.size()) + " heads and " + std::to_string(page.stat_names.size()) + " names");
  }
  for (const auto& row : page.stats) {
    if (row.size() != page.stat_names.size()) fail("--html: a head's statistics do not match their names");
  }
  const std::int64_t total = static_cast<std::int64_t>(page.weights.heads.size()) * page.weights.n * page.weights.m;
  if (total > kMaxHtmlWeights) {
    fail("--html: " + std::to_string(page.weights.heads.size()) + " heads of n = " + std::to_string(page.weights.n) +
         " by m = " + std::to_string(page.weights.m) + " is " + std::to_string(total) + " weights, more than a page shows well (" +
         std::to_string(kMaxHtmlWeights) + "); pick fewer with --heads, or shorter sequences");
  }
}

// The page: styles, the controls, the two views, and the script that draws them from the data.
constexpr std::string_view kPageHead = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>attnkit heatmap</title>
<style>
  body { font: 14px/1.4 "DejaVu Sans", system-ui, sans-serif; margin: 20px; color: #222; }
  h1 { font-size: 18px; margin: 0 0 10px; }
  #controls { display: flex; gap: 18px; align-items: center; margin-bottom: 8px; }
  #info { font-family: "DejaVu Sans Mono", monospace; min-height: 1.4em; margin-bottom: 8px; }
  #views { display: flex; gap: 24px; align-items: flex-start; }
  canvas { image-rendering: pixelated; }
  #colorbar { display: flex; flex-direction: column; align-items: flex-start; gap: 4px; }
  #lines text { font-size: 13px; cursor: default; }
  #lines text.active { font-weight: bold; }
  .note { color: #777; font-size: 12px; }
  #text { max-width: 900px; margin-bottom: 8px; line-height: 2; }
  #text span { padding: 2px 4px; margin: 0 1px; border-radius: 3px; cursor: default; }
  #text span.active { outline: 2px solid #d33; }
  #stats td { padding: 1px 8px; }
  #stats td:last-child { font-family: "DejaVu Sans Mono", monospace; text-align: right; }
  h2 { font-size: 15px; margin: 18px 0 6px; }
  #multiples { display: flex; flex-wrap: wrap; gap: 10px; }
  .multiple { margin: 0; cursor: pointer; text-align: center; font-size: 11px; color: #555; }
  .multiple canvas { border: 2px solid transparent; }
  .multiple.selected canvas { border-color: #d33; }
  .multiple figcaption b { color: #222; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div id="controls">
  <label id="layer-label" hidden>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
  <label><input type="radio" name="view" value="heatmap" checked> heatmap</label>
  <label><input type="radio" name="view" value="lines"> lines</label>
</div>
<div id="text" hidden></div>
<div id="info">Point at a cell (heatmap), a query token (lines) or a word of the text.</div>
<div id="views">
  <canvas id="heatmap"></canvas>
  <svg id="lines" xmlns="http://www.w3.org/2000/svg" style="display:none"></svg>
  <div id="colorbar"><span id="bar-max"></span><canvas id="bar" width="16" height="200"></canvas><span>0</span>
    <span class="note">colour: weight / the head's largest weight</span></div>
  <div id="stats-box" hidden><table id="stats"></table><p class="note" id="stat-note"></p></div>
</div>
<h2 id="multiples-title"></h2>
<div id="multiples"></div>
<p class="note">Rows are queries, columns keys; each row's weights sum to 1 (0 for a query that sees no key).
Written by attnkit heatmap; self-contained, no network.</p>
<script id="data" type="application/json">)html";

constexpr std::string_view kPageTail = R"html(</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const n = data.queries.length, m = data.keys.length;
const headSelect = document.getElementById("head");
const layerSelect = document.getElementById("layer");
const info = document.getElementById("info");
const canvas = document.getElementById("heatmap");
const svg = document.getElementById("lines");
document.getElementById("title").textContent = data.title || "Attention weights";
function headName(p) { return "head " + data.heads[p] + (data.names[p] ? ": " + data.names[p] : ""); }

// Layers (a model's): pick a layer, then one of its heads. Without them every panel is offered.
const hasLayers = data.layers.length > 0;
if (hasLayers) {
  [...new Set(data.layers)].sort((a, b) => a - b).forEach((layer) => layerSelect.add(new Option("layer " + layer, String(layer))));
  document.getElementById("layer-label").hidden = false;
}
function offered() {
  return data.heads.map((_, p) => p).filter((p) => !hasLayers || data.layers[p] === Number(layerSelect.value));
}
function fillHeads() {
  headSelect.replaceChildren(...offered().map((p) => new Option(headName(p), String(p))));
}
fillHeads();

// Layout of the heatmap: room for the labels on the left and on top, square cells.
const cell = Math.max(2, Math.min(40, Math.floor(640 / Math.max(n, m, 1))));
const labelled = cell >= 10;
const gridLeft = labelled ? 110 : 10, gridTop = labelled ? 110 : 10;
canvas.width = gridLeft + m * cell + 10;
canvas.height = gridTop + n * cell + 10;
canvas.dataset.cell = cell;
canvas.dataset.left = gridLeft;
canvas.dataset.top = gridTop;

function panel() { return Number(headSelect.value); }
function weight(p, i, j) { return data.weights[p][i * m + j]; }
function largest(p) { return data.weights[p].reduce((a, b) => Math.max(a, b), 0); }
function colour(w, max) {
  const t = max > 0 ? Math.min(1, Math.max(0, w / max)) : 0;
  return data.colormap[Math.round(t * 255)];
}
function clip(text) { return text.length > 14 ? text.slice(0, 13) + "\u2026" : text; }
function formatStat(value) { return value === null ? "n/a" : value.toFixed(3); }

function drawHeatmap() {
  const p = panel(), max = largest(p), ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < m; j++) {
      ctx.fillStyle = colour(weight(p, i, j), max);
      ctx.fillRect(gridLeft + j * cell, gridTop + i * cell, cell, cell);
    }
  if (labelled) {
    ctx.fillStyle = "#222";
    ctx.font = Math.min(13, cell - 2) + "px 'DejaVu Sans', sans-serif";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    data.queries.forEach((q, i) => ctx.fillText(clip(q), gridLeft - 4, gridTop + (i + 0.5) * cell));
    data.keys.forEach((k, j) => {
      ctx.save();
      ctx.translate(gridLeft + (j + 0.5) * cell, gridTop - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.fillText(clip(k), 0, 0);
      ctx.restore();
    });
  }
  const bar = document.getElementById("bar").getContext("2d");
  for (let y = 0; y < 200; y++) {
    bar.fillStyle = data.colormap[Math.round((199 - y) / 199 * 255)];
    bar.fillRect(0, y, 16, 1);
  }
  document.getElementById("bar-max").textContent = max.toPrecision(3);
}

function show(p, i, j) {
  const w = weight(p, i, j);
  info.textContent = "head " + data.heads[p] + ": query " + i + " \u201c" + data.queries[i] + "\u201d \u2192 key " + j +
      " \u201c" + data.keys[j] + "\u201d: " + w.toPrecision(6);
  info.dataset.query = i;
  info.dataset.key = j;
  info.dataset.weight = w;
}

canvas.addEventListener("mousemove", (event) => {
  const box = canvas.getBoundingClientRect();
  const j = Math.floor((event.clientX - box.left - gridLeft) / cell);
  const i = Math.floor((event.clientY - box.top - gridTop) / cell);
  if (i >= 0 && i < n && j >= 0 && j < m) show(panel(), i, j);
});

// The lines view: queries on the left, keys on the right, a line for every weight of at least
// 1% (width ∝ weight); pointing at a query keeps only its lines (hidden, not redrawn, so the
// label under the pointer stays the same element).
const kLinesLimit = 200, row = 18, width = 420;
function focusQuery(focus) {
  svg.querySelectorAll("line").forEach((line) => {
    line.style.display = focus === undefined || Number(line.dataset.query) === focus ? "" : "none";
    line.setAttribute("stroke-opacity", focus === undefined ? 0.5 : 0.9);
  });
  svg.querySelectorAll("text.query").forEach((t) => t.classList.toggle("active", Number(t.dataset.query) === focus));
}
function drawLines() {
  const p = panel(), ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  if (n > kLinesLimit || m > kLinesLimit) {
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", 10); text.setAttribute("y", 20);
    text.textContent = "The lines view shows up to " + kLinesLimit + " tokens a side.";
    svg.append(text);
    svg.setAttribute("width", 420); svg.setAttribute("height", 40);
    return;
  }
  svg.setAttribute("width", width);
  svg.setAttribute("height", row * Math.max(n, m) + 10);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < m; j++) {
      const w = weight(p, i, j);
      if (w < 0.01) continue;
      const line = document.createElementNS(ns, "line");
      line.setAttribute("x1", 130); line.setAttribute("y1", (i + 0.5) * row + 5);
      line.setAttribute("x2", width - 130); line.setAttribute("y2", (j + 0.5) * row + 5);
      line.setAttribute("stroke", "#2a6fb0");
      line.setAttribute("stroke-width", (8 * w).toFixed(3));
      line.setAttribute("stroke-opacity", 0.5);
      line.dataset.query = i; line.dataset.key = j; line.dataset.weight = w;
      svg.append(line);
    }
  const label = (text, x, y, anchor, cls, index) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("text-anchor", anchor);
    t.setAttribute("dominant-baseline", "middle");
    t.setAttribute("class", cls);
    t.textContent = clip(text);
    if (cls === "query") {
      t.dataset.query = index;
      t.addEventListener("mouseenter", () => focusQuery(index));
    }
    svg.append(t);
  };
  data.queries.forEach((q, i) => label(q, 124, (i + 0.5) * row + 5, "end", "query", i));
  data.keys.forEach((k, j) => label(k, width - 124, (j + 0.5) * row + 5, "start", "key", j));
}
svg.addEventListener("mouseleave", () => focusQuery());

// The chosen head's statistics, in a table beside the views.
function drawStats() {
  const p = panel(), table = document.getElementById("stats");
  document.getElementById("stats-box").hidden = data.statNames.length === 0;
  table.replaceChildren();
  data.statNames.forEach((name, k) => {
    const tr = table.insertRow(), value = data.stats[p][k];
    tr.insertCell().textContent = name;
    const td = tr.insertCell();
    td.textContent = formatStat(value);
    td.dataset.stat = name;
    td.dataset.value = value === null ? "" : value;
  });
  document.getElementById("stat-note").textContent = data.statNote;
}

// Small multiples: every offered head at one pixel per weight, scaled up, with its statistics;
// clicking one chooses it.
const rgb = data.colormap.map((hex) => [1, 3, 5].map((at) => parseInt(hex.slice(at, at + 2), 16)));
function drawMultiples() {
  const box = document.getElementById("multiples"), scale = 120 / Math.max(n, m, 1);
  document.getElementById("multiples-title").textContent =
      (hasLayers ? "All heads of layer " + layerSelect.value : "All heads") + " (click one to choose it)";
  box.replaceChildren();
  for (const p of offered()) {
    const figure = document.createElement("figure"), small = document.createElement("canvas");
    figure.className = "multiple" + (p === panel() ? " selected" : "");
    figure.dataset.panel = p;
    small.width = Math.max(m, 1);
    small.height = Math.max(n, 1);
    small.style.width = Math.round(m * scale) + "px";
    small.style.height = Math.round(n * scale) + "px";
    const ctx = small.getContext("2d"), image = ctx.createImageData(small.width, small.height), max = largest(p);
    for (let i = 0; i < n; i++)
      for (let j = 0; j < m; j++) {
        const t = max > 0 ? Math.min(1, Math.max(0, weight(p, i, j) / max)) : 0, c = rgb[Math.round(t * 255)];
        image.data.set([c[0], c[1], c[2], 255], 4 * (i * m + j));
      }
    ctx.putImageData(image, 0, 0);
    const caption = document.createElement("figcaption"), title = document.createElement("b");
    title.textContent = headName(p);
    caption.append(title);
    data.statNames.forEach((name, k) => {
      caption.append(document.createElement("br"), name + " " + formatStat(data.stats[p][k]));
    });
    figure.append(small, caption);
    figure.addEventListener("click", () => { headSelect.value = String(p); redraw(); });
    box.append(figure);
  }
}

// Self-attention with token labels: the text, whose tokens are shaded by how much the token under
// the pointer attends to them (the chosen head).
const selfAttention = n === m && data.queries.every((q, i) => q === data.keys[i]);
const textBox = document.getElementById("text");
if (selfAttention && n > 0) {
  textBox.hidden = false;
  data.queries.forEach((token, i) => {
    const span = document.createElement("span");
    span.textContent = token;
    span.dataset.index = i;
    span.addEventListener("mouseenter", () => shadeText(i));
    textBox.append(span, " ");
  });
  textBox.addEventListener("mouseleave", () => shadeText());
}
function shadeText(query) {
  const p = panel(), spans = textBox.querySelectorAll("span");
  let row = 0;
  if (query !== undefined) for (let j = 0; j < m; j++) row = Math.max(row, weight(p, query, j));
  spans.forEach((span, j) => {
    const w = query === undefined ? 0 : weight(p, query, j);
    span.style.background = w > 0 && row > 0 ? "rgba(255, 140, 0, " + (w / row).toFixed(3) + ")" : "";
    span.classList.toggle("active", j === query);
    if (query === undefined) delete span.dataset.weight; else span.dataset.weight = w;
  });
  if (query === undefined) return;
  const top = [...Array(m).keys()].sort((a, b) => weight(p, query, b) - weight(p, query, a)).slice(0, 3);
  info.textContent = "head " + data.heads[p] + ": \u201c" + data.queries[query] + "\u201d attends to " +
      top.map((j) => "\u201c" + data.keys[j] + "\u201d " + weight(p, query, j).toFixed(3)).join(", ");
  info.dataset.query = query;
  delete info.dataset.key;
  delete info.dataset.weight;
}

function view() { return document.querySelector("input[name=view]:checked").value; }
function redraw() {
  canvas.style.display = view() === "heatmap" ? "" : "none";
  svg.style.display = view() === "lines" ? "" : "none";
  drawHeatmap();
  drawLines();
  drawStats();
  drawMultiples();
  if (selfAttention) shadeText();
}
headSelect.addEventListener("change", redraw);
layerSelect.addEventListener("change", () => { fillHeads(); redraw(); });
document.querySelectorAll("input[name=view]").forEach((radio) => radio.addEventListener("change", redraw));
redraw();
</script>
</body>
</html>
)html";

}  // namespace

std::string heatmap_html(const HeatmapPage& page) {
  check(page);
  std::string html(kPageHead);
  html += page_data(page);
  html += kPageTail;
  return html;
}

void write_heatmap_html(const HeatmapPage& page, const std::string& path) {
  const std::string html = heatmap_html(page);
  std::ofstream file(path, std::ios::binary);
  if (!file) throw Error(ErrorCode::io_error, "--html " + path + ": cannot open for writing");
  file.write(html.data(), static_cast<std::streamsize>(html.size()));
  if (!file) throw Error(ErrorCode::io_error, "--html " + path + ": write failed");
}

}  // namespace attnkit::cli
