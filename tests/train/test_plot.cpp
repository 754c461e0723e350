// Tests for train/plot: the CSV holds the numbers, the SVG is well-formed-ish and skips
// non-finite points, bad paths and bad input give one-line errors.
#include "train/plot.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

namespace fs = std::filesystem;
using gg::train::Series;

namespace {

std::string tmp_path(const std::string& name) {
  static struct TempDir {
    fs::path dir = fs::temp_directory_path() / fmt::format("gg_test_plot_{}", ::getpid());
    TempDir() { fs::create_directories(dir); }
    ~TempDir() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } t;
  return (t.dir / name).string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// The number of points in each polyline of an SVG, in order.
std::vector<std::size_t> polyline_sizes(const std::string& svg) {
  std::vector<std::size_t> sizes;
  for (std::size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    std::size_t b = svg.find("points=\"", p) + 8;
    std::size_t e = svg.find('"', b);
    sizes.push_back(count(svg.substr(b, e - b), ",") );
  }
  return sizes;
}

const double nan_v = std::numeric_limits<double>::quiet_NaN();
const double inf_v = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("write_csv holds every point in long format") {
  std::vector<Series> s = {{"train", {1, 2, 3}, {2.5, 2.25, 0.1}}, {"val, held out", {2}, {1e-5}},
                           {"diverged", {1, 2}, {nan_v, -inf_v}}};
  std::string p = tmp_path("curves.csv");
  gg::train::write_csv(p, s);
  CHECK(read_text(p) ==
        "series,x,y\n"
        "train,1,2.5\n"
        "train,2,2.25\n"
        "train,3,0.1\n"
        "\"val, held out\",2,1e-05\n"
        "diverged,1,nan\n"
        "diverged,2,-inf\n");
  CHECK_FALSE(fs::exists(p + ".tmp"));
}

TEST_CASE("write_svg draws one polyline per finite run, a legend and labelled axes") {
  Series a{"train loss", {}, {}};
  for (int i = 0; i < 50; ++i) {
    a.x.push_back(i * 10);
    a.y.push_back(4.0 * std::exp(-i / 20.0));
  }
  Series b{"val <loss> & co", {0, 100, 200, 300}, {4.1, 3.0, 2.2, 1.9}};
  std::string p = tmp_path("curves.svg");
  gg::train::write_svg(p, "Loss \"tiny\"", "step", "loss", {a, b});
  std::string svg = read_text(p);
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.find("</svg>\n") == svg.size() - 7);
  CHECK(count(svg, "<text") == count(svg, "</text>"));
  CHECK(count(svg, "<g") == count(svg, "</g>"));
  CHECK(svg.find("train loss") != std::string::npos);
  CHECK(svg.find("val &lt;loss&gt; &amp; co") != std::string::npos);
  CHECK(svg.find("Loss &quot;tiny&quot;") != std::string::npos);
  CHECK(svg.find(">step</text>") != std::string::npos);
  CHECK(svg.find(">loss</text>") != std::string::npos);
  CHECK(polyline_sizes(svg) == std::vector<std::size_t>{50, 4});
  // Ticks: x runs 0..500 in steps of 100 (or 50), y has round labels.
  CHECK(svg.find(">0</text>") != std::string::npos);
  CHECK(svg.find(">500</text>") != std::string::npos);
  CHECK(svg.find(">1</text>") != std::string::npos);
  // Two distinct colors.
  CHECK(svg.find("#1f77b4") != std::string::npos);
  CHECK(svg.find("#ff7f0e") != std::string::npos);
  CHECK(svg.find("nan") == std::string::npos);
}

TEST_CASE("write_svg skips non-finite values and still plots a diverging run") {
  Series d{"diverging", {1, 2, 3, 4, 5, 6, 7}, {3.0, 2.0, 2.5, nan_v, 4.0, inf_v, -inf_v}};
  std::string p = tmp_path("diverge.svg");
  gg::train::write_svg(p, "t", "x", "y", {d});
  std::string svg = read_text(p);
  CHECK(polyline_sizes(svg) == std::vector<std::size_t>{3});
  CHECK(count(svg, "<circle") == 1);  // the lone point (5, 4.0) between nan and inf
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf") == std::string::npos);
  // The y range comes from the finite values 2..4.
  CHECK(svg.find(">4.0</text>") != std::string::npos);
  CHECK(svg.find(">2.0</text>") != std::string::npos);

  SUBCASE("all values non-finite, or no series at all, still give a chart") {
    gg::train::write_svg(p, "t", "x", "y", {{"dead", {1, 2}, {nan_v, nan_v}}});
    CHECK(polyline_sizes(read_text(p)).empty());
    gg::train::write_svg(p, "t", "x", "y", {});
    CHECK(read_text(p).rfind("<svg", 0) == 0);
  }
  SUBCASE("a constant series gets a window around its value") {
    gg::train::write_svg(p, "t", "x", "y", {{"flat", {0, 1, 2}, {5, 5, 5}}});
    std::string flat = read_text(p);
    CHECK(polyline_sizes(flat) == std::vector<std::size_t>{3});
    CHECK(flat.find(">5.0</text>") != std::string::npos);
  }
}

TEST_CASE("plot writers refuse bad input and bad paths with one-line errors") {
  std::string nowhere = tmp_path("no_such_dir/out.svg");
  CHECK_THROWS_WITH_AS(gg::train::write_svg(nowhere, "t", "x", "y", {{"a", {1}, {1}}}),
                       (nowhere + ": cannot create " + nowhere + ".tmp: No such file or directory").c_str(),
                       std::runtime_error);
  std::string csv = tmp_path("no_such_dir/out.csv");
  CHECK_THROWS_WITH_AS(gg::train::write_csv(csv, {}),
                       (csv + ": cannot create " + csv + ".tmp: No such file or directory").c_str(),
                       std::runtime_error);
  std::string p = tmp_path("mismatch.csv");
  CHECK_THROWS_WITH_AS(gg::train::write_csv(p, {{"a", {1, 2}, {1}}}),
                       (p + ": series 'a' has 2 x values but 1 y values").c_str(), std::runtime_error);
  CHECK_FALSE(fs::exists(p));
}
