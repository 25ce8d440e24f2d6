// A small SVG writer for side-by-side heatmaps of one [rows][cols] grid each (here: layers x
// KV heads), every panel with its own colour scale (viridis, from the panel's minimum to its
// maximum) drawn as a labelled vertical bar, and optional text in each cell.
//
// The document starts with "<svg" and holds exactly 1 + sum over panels of (rows * cols + 1)
// <rect> elements: the background, one per cell, one colour bar per panel (a gradient).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace adakv::profile {

struct HeatmapPanel {
  std::string title;
  std::vector<std::vector<double>> values;          // [row][col]; NaN draws a grey cell
  std::vector<std::vector<std::string>> cell_text;  // [row][col] or empty: no text
  int tick_decimals = 0;                            // of the colour bar's labels
};

struct HeatmapFigure {
  std::string title;
  std::vector<std::string> notes;   // lines under the title
  std::vector<std::string> footer;  // lines under the panels
  std::string row_prefix = "L";     // row labels: prefix + index
  std::string col_prefix = "h";     // column labels: prefix + index
  std::vector<HeatmapPanel> panels;
};

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};
// The viridis colour map at t in [0, 1] (clamped): dark purple -> teal -> yellow.
Rgb viridis(double t);

// Throws std::invalid_argument when there is no panel, a panel is empty, or the panels (and
// their cell_text) differ in shape.
std::string heatmap_svg(const HeatmapFigure& figure);

}  // namespace adakv::profile
