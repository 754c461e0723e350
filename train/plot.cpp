// The CSV and SVG writers for training reports: "nice" axis ticks (1, 2, 5 times a power
// of ten), the mapping from data to pixels and the atomic file write.
// Not here: any knowledge of what the series mean.
#include "train/plot.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace gg::train {

namespace {

// Writes `text` to path + ".tmp", flushes it to disk and renames it over `path`.
void write_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(fmt::format("{}: cannot create {}: {}", path, tmp, std::strerror(errno)));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
            ::fsync(::fileno(f)) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: cannot write {}: {}", path, tmp, std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: cannot rename {} over it: {}", path, tmp, std::strerror(err)));
  }
}

void check_sizes(const std::string& path, const std::vector<Series>& series) {
  for (const Series& s : series) {
    if (s.x.size() != s.y.size())
      throw std::runtime_error(fmt::format("{}: series '{}' has {} x values but {} y values", path, s.name,
                                           s.x.size(), s.y.size()));
  }
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters other than tab are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t') out += ' ';
        else out += c;
    }
  }
  return out;
}

// An axis: the shown range [lo, hi] (multiples of step) and the tick spacing.
struct Axis {
  double lo, hi, step;
};

// Ticks at 1, 2 or 5 times a power of ten, about `target` of them, covering [lo, hi].
Axis nice_axis(double lo, double hi, int target) {
  if (!(lo < hi)) {  // one value (or none): open a window around it
    double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  double raw = (hi - lo) / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, step};
}

// A tick label with as many decimals as the step (1, 2 or 5 times 10^k) needs: "0.05", "1500", "2e+06".
std::string tick_label(double v, double step) {
  if (std::fabs(v) < step * 1e-6) v = 0;  // no "-0" or "1e-17"
  double big = std::max(std::fabs(v), step);
  if (big >= 1e6 || step < 1e-4) return fmt::format("{:.3g}", v);
  int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", v, decimals);
}

// Distinct colors (the Tableau 10 palette), reused after ten series.
const char* color(std::size_t i) {
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return palette[i % 10];
}

}  // namespace

void write_csv(const std::string& path, const std::vector<Series>& series) {
  check_sizes(path, series);
  std::string out = "series,x,y\n";
  for (const Series& s : series) {
    std::string name = csv_field(s.name);
    for (std::size_t i = 0; i < s.x.size(); ++i) out += fmt::format("{},{},{}\n", name, s.x[i], s.y[i]);
  }
  write_file_atomic(path, out);
}

void write_svg(const std::string& path, const std::string& title, const std::string& x_label,
               const std::string& y_label, const std::vector<Series>& series) {
  check_sizes(path, series);
  const double width = 800, height = 480;
  const double left = 80, right = 24, top = 48, bottom = 64;
  const double pw = width - left - right, ph = height - top - bottom;  // plot area

  // Ranges from the finite points only.
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const Series& s : series) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  }
  if (x_lo > x_hi) x_lo = 0, x_hi = 1;
  if (y_lo > y_hi) y_lo = 0, y_hi = 1;
  Axis ax = nice_axis(x_lo, x_hi, 8);
  Axis ay = nice_axis(y_lo, y_hi, 6);
  auto px = [&](double x) { return left + (x - ax.lo) / (ax.hi - ax.lo) * pw; };
  auto py = [&](double y) { return top + ph - (y - ay.lo) / (ay.hi - ay.lo) * ph; };

  std::string out;
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      width, height);
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += fmt::format("<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
                     left + pw / 2, xml_escape(title));

  // Grid and tick labels.
  out += "<g stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  int nx = static_cast<int>(std::round((ax.hi - ax.lo) / ax.step));
  int ny = static_cast<int>(std::round((ay.hi - ay.lo) / ay.step));
  for (int i = 0; i <= nx; ++i) {
    double x = px(ax.lo + i * ax.step);
    out += fmt::format("<line x1=\"{:.2f}\" y1=\"{}\" x2=\"{:.2f}\" y2=\"{}\"/>\n", x, top, x, top + ph);
  }
  for (int i = 0; i <= ny; ++i) {
    double y = py(ay.lo + i * ay.step);
    out += fmt::format("<line x1=\"{}\" y1=\"{:.2f}\" x2=\"{}\" y2=\"{:.2f}\"/>\n", left, y, left + pw, y);
  }
  out += "</g>\n<g fill=\"#333\">\n";
  for (int i = 0; i <= nx; ++i) {
    double v = ax.lo + i * ax.step;
    out += fmt::format("<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(v), top + ph + 18,
                       tick_label(v, ax.step));
  }
  for (int i = 0; i <= ny; ++i) {
    double v = ay.lo + i * ay.step;
    out += fmt::format("<text x=\"{}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n", left - 8, py(v) + 4,
                       tick_label(v, ay.step));
  }
  out += "</g>\n";
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", left,
                     top, pw, ph);
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">{}</text>\n", left + pw / 2,
                     height - 18, xml_escape(x_label));
  out += fmt::format(
      "<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 20 {0})\">{1}</text>\n",
      top + ph / 2, xml_escape(y_label));

  // The curves: one polyline per run of finite points, a dot for a lone point.
  for (std::size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    out += fmt::format("<g stroke=\"{0}\" fill=\"{0}\"><title>{1}</title>\n", color(k), xml_escape(s.name));
    std::vector<std::pair<double, double>> run;
    auto flush = [&]() {
      if (run.size() == 1) {
        out += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"2.5\"/>\n", run[0].first, run[0].second);
      } else if (run.size() > 1) {
        out += "<polyline fill=\"none\" stroke-width=\"1.8\" stroke-linejoin=\"round\" points=\"";
        for (std::size_t i = 0; i < run.size(); ++i)
          out += fmt::format("{}{:.2f},{:.2f}", i ? " " : "", run[i].first, run[i].second);
        out += "\"/>\n";
      }
      run.clear();
    };
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) run.emplace_back(px(s.x[i]), py(s.y[i]));
      else flush();
    }
    flush();
    out += "</g>\n";
  }

  // Legend in the top-right corner of the plot area.
  if (!series.empty()) {
    std::size_t longest = 0;
    for (const Series& s : series) longest = std::max(longest, s.name.size());
    double lw = 40 + 7.0 * static_cast<double>(std::min<std::size_t>(longest, 40));
    double lh = 8 + 18.0 * static_cast<double>(series.size());
    double lx = left + pw - lw - 8, ly = top + 8;
    out += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"white\" fill-opacity=\"0.85\" "
        "stroke=\"#bbb\"/>\n",
        lx, ly, lw, lh);
    for (std::size_t k = 0; k < series.size(); ++k) {
      double y = ly + 16 + 18.0 * static_cast<double>(k);
      out += fmt::format("<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"{}\" stroke-width=\"3\"/>\n",
                         lx + 8, y - 4, lx + 30, y - 4, color(k));
      out += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\">{}</text>\n", lx + 36, y, xml_escape(series[k].name));
    }
  }
  out += "</svg>\n";
  write_file_atomic(path, out);
}

}  // namespace gg::train
