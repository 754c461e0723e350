// Helpers shared by the test executables: scratch directories, whole-file reads and the
// path of a golden file, repeatable wave data. Header-only; every test executable may include it.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef GG_SOURCE_DIR
#define GG_SOURCE_DIR "."
#endif

namespace gg::test {

// A fresh directory, removed with everything in it at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("gg_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string golden(const std::string& file) { return std::string(GG_SOURCE_DIR) + "/tests/golden/" + file; }

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// n values of scale * sin(step * i + salt): varied, repeatable test data.
inline std::vector<float> wave(std::int64_t n, float scale, int salt, double step) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = scale * float(std::sin(step * double(i) + salt));
  return v;
}

// The message of the E that `f()` throws, or "" when it throws none (a check on the
// message then fails, naming what was expected).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// Runs `f(out)` with a temporary file as `out` (a report stream), puts what was written in
// *text and returns f's result; the file is closed even when f throws.
template <class F>
auto capture(F&& f, std::string* text) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::tmpfile(), &std::fclose);
  if (!file) throw std::runtime_error("capture: no temporary file");
  auto result = f(file.get());
  std::rewind(file.get());
  std::string all;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, file.get())) > 0;) all.append(buf, n);
  if (text) *text = all;
  return result;
}

// Distance of `got` from the correctly rounded float of `want`, in units in the last
// place (0: exact). Results in the subnormal range count as exact (flushing is fine).
inline double ulps(float got, double want) {
  const float w = float(want);
  if (std::isnan(got) != std::isnan(w)) return 1e30;
  if (std::isinf(w) || std::isinf(got)) return got == w ? 0.0 : 1e30;
  const float tiny = std::numeric_limits<float>::min();
  if (std::abs(w) < tiny && std::abs(got) < tiny) return 0.0;
  const float spacing = std::nextafter(std::abs(w), std::numeric_limits<float>::infinity()) - std::abs(w);
  return std::abs(double(got) - double(w)) / double(spacing);
}

}  // namespace gg::test
