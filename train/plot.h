// Training-report files: a CSV of the points of named series (loss curves and the like)
// and a self-contained SVG line chart of them. Both are written to path + ".tmp" and
// renamed over `path`, so a reader never sees half a file.
// Not here: log scales, interactivity, reading these files back.
#pragma once

#include <string>
#include <vector>

namespace gg::train {

// One curve: the points (x[i], y[i]). Non-finite y (a diverging run) is allowed.
struct Series {
  std::string name;
  std::vector<double> x, y;
};

// Writes a CSV in long format: the header line "series,x,y", then one row per point,
// series in the given order, points in their order. Numbers use the shortest text that
// reads back to the same double ("nan", "inf", "-inf" for non-finite values); a name
// holding a comma, quote or line break is quoted as RFC 4180 says.
// Requires x.size() == y.size() in every series. Throws std::runtime_error naming the path.
void write_csv(const std::string& path, const std::vector<Series>& series);

// Writes an SVG line chart: title, axes with numeric tick labels, grid, one colored
// polyline per series and a legend. Points with a non-finite x or y are skipped (the line
// breaks there); the axis ranges come from the finite points only. A series' lone points
// are drawn as dots.
// Requires x.size() == y.size() in every series. Throws std::runtime_error naming the path.
void write_svg(const std::string& path, const std::string& title, const std::string& x_label,
               const std::string& y_label, const std::vector<Series>& series);

}  // namespace gg::train
