// Cells of the plain-text tables the eval commands print.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace adakv::eval {

// A fraction as a percentage with one decimal ("97.5"); "-" for NaN.
inline std::string pct(double v) {
  if (std::isnan(v)) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f", 100 * v);
  return buf;
}

// Right-aligns `s` in `width` columns (left-aligns with a negative width).
inline std::string pad(const std::string& s, int width) {
  const size_t w = static_cast<size_t>(std::abs(width));
  if (s.size() >= w) return s;
  const std::string fill(w - s.size(), ' ');
  return width < 0 ? s + fill : fill + s;
}

}  // namespace adakv::eval
