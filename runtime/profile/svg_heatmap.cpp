#include "runtime/profile/svg_heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "runtime/svg_output.h"

namespace adakv::profile {
namespace {

// Geometry, in pixels.
constexpr int kMargin = 20;
constexpr int kTitleLine = 22;
constexpr int kNoteLine = 16;
constexpr int kPanelTitle = 20;
constexpr int kHeader = 16;    // column labels above the grid
constexpr int kRowLabel = 34;  // row labels left of the grid
constexpr int kCellW = 52;
constexpr int kCellH = 16;
constexpr int kBarGap = 10;  // grid -> colour bar
constexpr int kBarW = 14;
constexpr int kTickText = 58;  // colour bar -> next panel
constexpr int kPanelGap = 24;
// Rough character widths of the fonts used, to size the page (SVG does not wrap text).
constexpr size_t kTitleCharW = 10;
constexpr size_t kPanelTitleCharW = 8;
constexpr size_t kNoteCharW = 6;

// Evenly spaced samples of matplotlib's viridis, interpolated linearly in between.
constexpr Rgb kViridis[] = {{68, 1, 84},    {71, 44, 122},  {59, 82, 139},
                            {44, 114, 142}, {33, 145, 140}, {40, 174, 128},
                            {94, 201, 98},  {173, 220, 48}, {253, 231, 37}};

std::string hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

// Black text on light cells, white on dark ones (relative luminance).
const char* text_colour(Rgb c) {
  const double y = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
  return y > 128 ? "#000" : "#fff";
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

void text(std::string& out, double x, double y, const std::string& s, int size,
          const char* anchor = "start", const char* fill = "#222", const char* weight = "normal") {
  out += "<text x=\"" + fixed(x, 1) + "\" y=\"" + fixed(y, 1) + "\" font-size=\"" +
         std::to_string(size) + "\" text-anchor=\"" + anchor + "\" fill=\"" + fill +
         "\" font-weight=\"" + weight + "\">" + svg::escape(s) + "</text>\n";
}

void check_shapes(const HeatmapFigure& f) {
  if (f.panels.empty()) throw std::invalid_argument("heatmap: no panel");
  const auto& first = f.panels.front().values;
  if (first.empty() || first.front().empty()) throw std::invalid_argument("heatmap: empty grid");
  for (const auto& p : f.panels) {
    if (p.values.size() != first.size()) {
      throw std::invalid_argument("heatmap: panels have different row counts");
    }
    for (const auto& row : p.values) {
      if (row.size() != first.front().size()) {
        throw std::invalid_argument("heatmap: rows have different lengths");
      }
    }
    if (!p.cell_text.empty()) {
      if (p.cell_text.size() != first.size()) {
        throw std::invalid_argument("heatmap: cell text does not match the grid");
      }
      for (const auto& row : p.cell_text) {
        if (row.size() != first.front().size()) {
          throw std::invalid_argument("heatmap: cell text does not match the grid");
        }
      }
    }
  }
}

}  // namespace

Rgb viridis(double t) {
  constexpr size_t n = sizeof kViridis / sizeof kViridis[0];
  if (!(t > 0.0)) return kViridis[0];
  if (t >= 1.0) return kViridis[n - 1];
  const double x = t * static_cast<double>(n - 1);
  const size_t i = static_cast<size_t>(x);
  const double f = x - static_cast<double>(i);
  const Rgb a = kViridis[i], b = kViridis[i + 1];
  auto mix = [f](uint8_t u, uint8_t v) {
    return static_cast<uint8_t>(std::lround(u + f * (static_cast<double>(v) - u)));
  };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

std::string heatmap_svg(const HeatmapFigure& f) {
  check_shapes(f);
  const int rows = static_cast<int>(f.panels.front().values.size());
  const int cols = static_cast<int>(f.panels.front().values.front().size());
  const int n_panels = static_cast<int>(f.panels.size());
  const int grid_w = cols * kCellW, grid_h = rows * kCellH;
  size_t panel_title_w = 0;
  for (const auto& p : f.panels) panel_title_w = std::max(panel_title_w, p.title.size());
  const int panel_w = std::max(kRowLabel + grid_w + kBarGap + kBarW + kTickText,
                               kRowLabel + static_cast<int>(panel_title_w * kPanelTitleCharW));

  const int head_h = kTitleLine + kNoteLine * static_cast<int>(f.notes.size()) + 8;
  size_t text_w = f.title.size() * kTitleCharW;
  for (const auto& s : f.notes) text_w = std::max(text_w, s.size() * kNoteCharW);
  for (const auto& s : f.footer) text_w = std::max(text_w, s.size() * kNoteCharW);
  const int width = std::max(2 * kMargin + n_panels * panel_w + (n_panels - 1) * kPanelGap,
                             2 * kMargin + static_cast<int>(text_w));
  const int panels_top = kMargin + head_h;
  const int grid_top = panels_top + kPanelTitle + kHeader;
  const int height =
      grid_top + grid_h + 12 + kNoteLine * static_cast<int>(f.footer.size()) + kMargin;

  std::string out;
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) +
         " " + std::to_string(height) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  // One gradient serves every colour bar: bottom = the panel's minimum, top = its maximum.
  out += "<defs><linearGradient id=\"viridis\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int i = 0; i <= 10; ++i) {
    out += "<stop offset=\"" + fixed(i / 10.0, 1) + "\" stop-color=\"" + hex(viridis(i / 10.0)) +
           "\"/>";
  }
  out += "</linearGradient></defs>\n";
  out += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" fill=\"#fff\"/>\n";

  int y = kMargin + 16;
  text(out, kMargin, y, f.title, 16, "start", "#111", "bold");
  y += kTitleLine - 16 + 12;
  for (const auto& note : f.notes) {
    text(out, kMargin, y, note, 11, "start", "#444");
    y += kNoteLine;
  }

  for (int p = 0; p < n_panels; ++p) {
    const auto& panel = f.panels[p];
    const int x0 = kMargin + p * (panel_w + kPanelGap);
    const int gx = x0 + kRowLabel;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& row : panel.values) {
      for (double v : row) {
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
      }
    }
    if (!std::isfinite(lo)) lo = 0, hi = 1;
    text(out, gx, panels_top + 14, panel.title, 13, "start", "#111", "bold");
    for (int c = 0; c < cols; ++c) {
      text(out, gx + c * kCellW + kCellW / 2.0, grid_top - 4, f.col_prefix + std::to_string(c), 10,
           "middle", "#444");
    }
    for (int r = 0; r < rows; ++r) {
      const int cy = grid_top + r * kCellH;
      text(out, gx - 4, cy + kCellH - 4, f.row_prefix + std::to_string(r), 10, "end", "#444");
      for (int c = 0; c < cols; ++c) {
        const double v = panel.values[r][c];
        const bool finite = std::isfinite(v);
        const Rgb colour =
            finite ? viridis(hi > lo ? (v - lo) / (hi - lo) : 0.5) : Rgb{200, 200, 200};
        out += "<rect x=\"" + std::to_string(gx + c * kCellW) + "\" y=\"" + std::to_string(cy) +
               "\" width=\"" + std::to_string(kCellW) + "\" height=\"" + std::to_string(kCellH) +
               "\" fill=\"" + hex(colour) + "\" stroke=\"#fff\" stroke-width=\"0.5\"/>\n";
        if (!panel.cell_text.empty() && !panel.cell_text[r][c].empty()) {
          text(out, gx + c * kCellW + kCellW / 2.0, cy + kCellH - 4, panel.cell_text[r][c], 9,
               "middle", text_colour(colour));
        }
      }
    }
    const int bx = gx + grid_w + kBarGap;
    out += "<rect x=\"" + std::to_string(bx) + "\" y=\"" + std::to_string(grid_top) +
           "\" width=\"" + std::to_string(kBarW) + "\" height=\"" + std::to_string(grid_h) +
           "\" fill=\"url(#viridis)\" stroke=\"#888\" stroke-width=\"0.5\"/>\n";
    for (int i = 0; i <= 4; ++i) {
      const double v = hi - (hi - lo) * i / 4.0;
      const double ty = grid_top + grid_h * i / 4.0;
      out += "<line x1=\"" + std::to_string(bx + kBarW) + "\" y1=\"" + fixed(ty, 1) + "\" x2=\"" +
             std::to_string(bx + kBarW + 3) + "\" y2=\"" + fixed(ty, 1) + "\" stroke=\"#888\"/>\n";
      text(out, bx + kBarW + 5, ty + 3.5, fixed(v, panel.tick_decimals), 10, "start", "#444");
    }
  }

  y = grid_top + grid_h + 12 + 10;
  for (const auto& line : f.footer) {
    text(out, kMargin, y, line, 11, "start", "#444");
    y += kNoteLine;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace adakv::profile
