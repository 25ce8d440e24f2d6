// The evaluation's pictures as plain SVG text: accuracy heatmaps (depth x length) and a grouped
// bar chart; and their conversion to PNG when a converter is installed.
#pragma once

#include <string>
#include <vector>

namespace adakv::eval {

struct Heatmap {
  std::string title;
  std::string x_title, y_title;             // axis names ("prompt tokens", "needle depth")
  std::vector<std::string> x_labels;        // columns, left to right
  std::vector<std::string> y_labels;        // rows, top to bottom
  std::vector<std::vector<double>> values;  // [row][column] in [0, 1]; NaN: no data
};

// One heatmap, red (0) through yellow to green (1), each cell labelled with its percentage.
// Throws std::invalid_argument when `values` does not match the labels.
std::string heatmap_svg(const Heatmap& h);
// Several heatmaps of the same shape side by side, `columns` to a row, under one title.
std::string heatmap_grid_svg(const std::vector<Heatmap>& maps, size_t columns,
                             const std::string& title);

struct BarChart {
  std::string title, x_title, y_title;
  std::vector<std::string> groups;          // along x (budgets)
  std::vector<std::string> series;          // one bar per series in each group (policies)
  std::vector<std::vector<double>> values;  // [series][group] in [0, 1]; NaN: no bar
  double reference = -1;                    // dashed horizontal line (full cache) when >= 0
  std::string reference_label;
};

// Grouped bars with a legend; the y axis runs from 0 to 100%.
std::string bar_chart_svg(const BarChart& c);

}  // namespace adakv::eval
