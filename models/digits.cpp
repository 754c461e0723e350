// The digits loader and the fixed split.
#include "io/message.h"
#include "models/digits.h"

#include "io/read_file.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>
#include <string_view>
#include <utility>

#include "train/data_path.h"
#include "train/error.h"

namespace gg::models {

using train::InputError;

std::string default_digits_path() { return train::find_data_file("digits.csv"); }

Digits load_digits(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("{}: no such file", path));
  if (fs::is_directory(path, ec)) throw InputError(fmt::format("{}: is a directory, not a digits CSV", path));
  std::istringstream in;
  try {
    in.str(io::read_file(path, std::size_t(64) << 20, "digits CSV"));
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
  Digits d;
  std::string line;
  std::vector<std::string_view> fields;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto bad = [&](const std::string& what) { return InputError(fmt::format("{}:{}: {}", path, n, what)); };
    if (line.empty()) throw bad("empty line (expected 64 pixels, then the label)");
    fields.clear();
    for (std::size_t at = 0;;) {
      const std::size_t comma = line.find(',', at);
      fields.push_back(std::string_view(line).substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    if (std::int64_t(fields.size()) != Digits::pixels + 1)
      throw bad(fmt::format("expected {} comma-separated fields (64 pixels, then the label), got {}",
                            Digits::pixels + 1, fields.size()));
    for (std::int64_t i = 0; i <= Digits::pixels; ++i) {
      const std::string_view f = fields[std::size_t(i)];
      int v = 0;
      auto [end, err] = std::from_chars(f.data(), f.data() + f.size(), v);
      if (f.empty() || err != std::errc{} || end != f.data() + f.size())
        throw bad(fmt::format("field {} is '{}', not an integer", i + 1, io::cut(f, 20)));
      const bool label = i == Digits::pixels;
      const int hi = label ? 9 : 16;
      if (v < 0 || v > hi)
        throw bad(label ? fmt::format("label {} is out of range 0..9", v)
                        : fmt::format("pixel {} (field {}) is {}, out of range 0..16", i, i + 1, v));
      if (label) d.labels.push_back(v);
      else d.images.push_back(float(v) / 16.f);
    }
  }
  if (in.bad()) throw InputError(fmt::format("{}: read error", path));
  if (d.size() == 0) throw InputError(fmt::format("{}: no images (the file is empty)", path));
  return d;
}

Digits take_rows(const Digits& d, const std::vector<std::int64_t>& idx) {
  Digits out;
  out.images.reserve(idx.size() * std::size_t(Digits::pixels));
  out.labels.reserve(idx.size());
  for (std::int64_t i : idx) {
    if (i < 0 || i >= d.size()) throw InputError(fmt::format("take_rows: row {} is outside 0..{}", i, d.size() - 1));
    out.images.insert(out.images.end(), d.images.begin() + i * Digits::pixels, d.images.begin() + (i + 1) * Digits::pixels);
    out.labels.push_back(d.labels[std::size_t(i)]);
  }
  return out;
}

DigitsSplit split_rows(std::int64_t n, double test_fraction, std::uint64_t seed) {
  if (!(test_fraction > 0 && test_fraction < 1))
    throw InputError(fmt::format("split: test fraction must be in (0, 1), got {}", test_fraction));
  const std::int64_t n_test = std::llround(double(n) * test_fraction);
  if (n_test < 1 || n_test >= n)
    throw InputError(fmt::format("split: {} rows with test fraction {} leave an empty part", n, test_fraction));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[std::size_t(i)] = i;
  std::mt19937_64 rng(seed);
  for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[std::size_t(rng() % (i + 1))]);
  DigitsSplit s;
  s.test.assign(order.begin(), order.begin() + n_test);
  s.train.assign(order.begin() + n_test, order.end());
  return s;
}

}  // namespace gg::models
