#include "runtime/eval/svg_plot.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "runtime/svg_output.h"

namespace adakv::eval {
namespace {

// Heatmap geometry, in SVG pixels.
constexpr int kCellW = 64, kCellH = 30, kLeft = 96, kTop = 44, kBottom = 50, kRight = 16;

std::string fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

std::string text(double x, double y, const std::string& s, const char* anchor = "middle",
                 int size = 12, const char* extra = "") {
  return fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s>", x, y, anchor,
             size, extra) +
         svg::escape(s) + "</text>\n";
}

std::string svg_open(int w, int h) {
  return fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
             w, h, w, h) +
         fmt("<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
}

// Red (0) -> yellow (0.5) -> green (1), the usual diverging accuracy scale.
std::string color(double v) {
  if (std::isnan(v)) return "#dddddd";
  v = std::clamp(v, 0.0, 1.0);
  static const double stops[3][3] = {{215, 48, 39}, {254, 224, 139}, {26, 152, 80}};
  const int i = v < 0.5 ? 0 : 1;
  const double t = v < 0.5 ? v * 2 : (v - 0.5) * 2;
  int rgb[3];
  for (int k = 0; k < 3; ++k) {
    rgb[k] = int(std::lround(stops[i][k] + t * (stops[i + 1][k] - stops[i][k])));
  }
  return fmt("#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

// Wide enough for the cells and for the title (about 8.5 px per bold 14 px character).
int panel_width(const Heatmap& h) {
  const int cells = kLeft + int(h.x_labels.size()) * kCellW + kRight;
  return std::max(cells, int(h.title.size() * 17 / 2) + 20);
}
int panel_height(const Heatmap& h) {
  return kTop + int(h.y_labels.size()) * kCellH + kBottom;
}

void check(const Heatmap& h) {
  bool ok = h.values.size() == h.y_labels.size();
  for (const auto& row : h.values) ok = ok && row.size() == h.x_labels.size();
  if (!ok || h.x_labels.empty() || h.y_labels.empty()) {
    throw std::invalid_argument("heatmap \"" + h.title + "\": values do not match the labels");
  }
}

// The heatmap's elements in a panel `width` wide with its top-left corner at (x0, y0).
std::string draw_heatmap(const Heatmap& h, int x0, int y0, int width) {
  check(h);
  std::string s = fmt("<g transform=\"translate(%d,%d)\">\n", x0, y0);
  const int w = int(h.x_labels.size()) * kCellW, ht = int(h.y_labels.size()) * kCellH;
  s += text(width / 2.0, 24, h.title, "middle", 14, " font-weight=\"bold\"");
  for (size_t r = 0; r < h.y_labels.size(); ++r) {
    const int y = kTop + int(r) * kCellH;
    s += text(kLeft - 8, y + kCellH / 2.0 + 4, h.y_labels[r], "end");
    for (size_t c = 0; c < h.x_labels.size(); ++c) {
      const int x = kLeft + int(c) * kCellW;
      const double v = h.values[r][c];
      s +=
          fmt("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"white\"/>\n",
              x, y, kCellW, kCellH, color(v).c_str());
      s += text(x + kCellW / 2.0, y + kCellH / 2.0 + 4, std::isnan(v) ? "-" : fmt("%.0f", 100 * v));
    }
  }
  for (size_t c = 0; c < h.x_labels.size(); ++c) {
    s += text(kLeft + (c + 0.5) * kCellW, kTop + ht + 16, h.x_labels[c]);
  }
  s += text(kLeft + w / 2.0, kTop + ht + 36, h.x_title);
  s += fmt("<text transform=\"translate(%d,%.1f) rotate(-90)\" text-anchor=\"middle\" "
           "font-size=\"12\">",
           16, kTop + ht / 2.0) +
       svg::escape(h.y_title) + "</text>\n";
  return s + "</g>\n";
}

}  // namespace

std::string heatmap_svg(const Heatmap& h) {
  check(h);
  const int w = panel_width(h);
  return svg_open(w, panel_height(h)) + draw_heatmap(h, 0, 0, w) + "</svg>\n";
}

std::string heatmap_grid_svg(const std::vector<Heatmap>& maps, size_t columns,
                             const std::string& title) {
  if (maps.empty()) throw std::invalid_argument("heatmap grid: no heatmap");
  columns = std::clamp<size_t>(columns, 1, maps.size());
  int pw = 0;
  for (const auto& m : maps) {
    if (panel_height(m) != panel_height(maps.front())) {
      throw std::invalid_argument("heatmap grid: the heatmaps differ in shape");
    }
    pw = std::max(pw, panel_width(m));
  }
  const int ph = panel_height(maps.front());
  const size_t rows = (maps.size() + columns - 1) / columns;
  const int top = 36, w = int(columns) * pw, h = top + int(rows) * ph;
  std::string s = svg_open(w, h);
  s += text(w / 2.0, 24, title, "middle", 16, " font-weight=\"bold\"");
  for (size_t i = 0; i < maps.size(); ++i) {
    s += draw_heatmap(maps[i], int(i % columns) * pw, top + int(i / columns) * ph, pw);
  }
  return s + "</svg>\n";
}

std::string bar_chart_svg(const BarChart& c) {
  if (c.groups.empty() || c.series.empty() || c.values.size() != c.series.size()) {
    throw std::invalid_argument("bar chart \"" + c.title + "\": values do not match the labels");
  }
  for (const auto& v : c.values) {
    if (v.size() != c.groups.size()) {
      throw std::invalid_argument("bar chart \"" + c.title + "\": values do not match the groups");
    }
  }
  static const char* palette[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52",
                                  "#8172b3", "#937860", "#da8bc3", "#8c8c8c"};
  const int bar = 18, gap = 28, left = 60, top = 44, plot_h = 240, legend_w = 190;
  const int group_w = int(c.series.size()) * bar + gap;
  const int plot_w = int(c.groups.size()) * group_w;
  const int w = left + plot_w + legend_w, h = top + plot_h + 56;
  std::string s = svg_open(w, h);
  s += text(left + plot_w / 2.0, 24, c.title, "middle", 14, " font-weight=\"bold\"");
  for (int p = 0; p <= 100; p += 25) {
    const double y = top + plot_h * (1 - p / 100.0);
    s += fmt("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#cccccc\"/>\n", left, y,
             left + plot_w, y);
    s += text(left - 6, y + 4, std::to_string(p), "end", 11);
  }
  s += fmt("<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\" "
           "font-size=\"12\">",
           top + plot_h / 2.0) +
       svg::escape(c.y_title) + "</text>\n";
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const int gx = left + int(g) * group_w + gap / 2;
    for (size_t k = 0; k < c.series.size(); ++k) {
      const double v = c.values[k][g];
      if (std::isnan(v)) continue;
      const double bh = plot_h * std::clamp(v, 0.0, 1.0);
      const int x = gx + int(k) * bar;
      s += fmt("<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"/>\n", x,
               top + plot_h - bh, bar - 2, bh, palette[k % std::size(palette)]);
      s += text(x + bar / 2.0 - 1, top + plot_h - bh - 3, fmt("%.0f", 100 * v), "middle", 9);
    }
    s += text(gx + c.series.size() * bar / 2.0, top + plot_h + 18, c.groups[g]);
  }
  s += text(left + plot_w / 2.0, top + plot_h + 40, c.x_title);
  if (c.reference >= 0) {
    const double y = top + plot_h * (1 - std::clamp(c.reference, 0.0, 1.0));
    s +=
        fmt("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\" "
            "stroke-dasharray=\"6,4\"/>\n",
            left, y, left + plot_w, y);
  }
  const int lx = left + plot_w + 16;
  for (size_t k = 0; k < c.series.size(); ++k) {
    const int y = top + int(k) * 20;
    s += fmt("<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", lx, y,
             palette[k % std::size(palette)]);
    s += text(lx + 18, y + 10, c.series[k], "start");
  }
  if (c.reference >= 0) {
    const int y = top + int(c.series.size()) * 20 + 6;
    s +=
        fmt("<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\" "
            "stroke-dasharray=\"6,4\"/>\n",
            lx, y, lx + 12, y);
    s += text(lx + 18, y + 4, c.reference_label, "start");
  }
  return s + "</svg>\n";
}

}  // namespace adakv::eval
