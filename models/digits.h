// The 8x8 handwritten digits (data/digits.csv, 1,797 images): a loader that checks every
// line, and the fixed 80/20 train/test split the ViT job and its tests use. Not here: the
// model (models/vit.h) or batches (the job draws them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gg::models {

// Images side by side: pixels (N, 8, 8) scaled from 0..16 to [0, 1], labels (N) in 0..9.
struct Digits {
  static constexpr std::int64_t side = 8, pixels = side * side, classes = 10;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  std::int64_t size() const { return std::int64_t(labels.size()); }
};

// Reads one image a line: 64 integer pixels in 0..16, then the label in 0..9, separated by
// commas (a trailing '\r' is allowed). Throws InputError "<path>:<line>: <problem>" on the
// first bad line (wrong field count, a field that is not an integer, a value out of range,
// an empty line), and "<path>: ..." for a missing, unreadable or empty file.
Digits load_digits(const std::string& path);

// The bundled data/digits.csv (found as train::find_data_file finds every data file).
std::string default_digits_path();

// The rows of `d` listed in `idx`, in that order.
Digits take_rows(const Digits& d, const std::vector<std::int64_t>& idx);

// The seed of the fixed split; changing it changes every published accuracy.
inline constexpr std::uint64_t kDigitsSplitSeed = 20240601;

struct DigitsSplit {
  std::vector<std::int64_t> train, test;  // row indices into the loaded set, disjoint, covering it
};

// A permutation of 0..n-1 by Fisher-Yates with std::mt19937_64(seed) (the standard fixes its
// output, and the index is drawn as rng() % (i + 1), not through a distribution, whose
// algorithm is implementation-defined): the same on every platform. The first
// round(n * test_fraction) rows of it are the test set, the rest the training set.
// Requires 0 < test_fraction < 1 and both parts non-empty; throws InputError otherwise.
DigitsSplit split_rows(std::int64_t n, double test_fraction = 0.2, std::uint64_t seed = kDigitsSplitSeed);

}  // namespace gg::models
