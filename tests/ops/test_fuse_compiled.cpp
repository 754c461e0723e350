// Every program of ops/passes/fused_programs.inc, compiled, gives the interpreter's values bit for
// bit (ops/passes/fuse_compiled.h): on row groups of one and several rows, flat groups whose size
// is and is not a whole number of registers (the tail goes to the interpreter), parts of
// the extent as a batch slice runs them, inputs with zeros of both signs, infinities, NaN
// and values where erf, exp and tanh saturate, at 1 and 2 threads. Outside the range run,
// outputs keep what they held.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/passes/fuse_compiled.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd.h"

using namespace gg;

namespace {

std::vector<float> values(std::int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  const float special[] = {0.f, -0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 9.f, -9.f, 80.f, -80.f, 1e-30f, 3.9192f};
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = rng() % 8 == 0 ? special[rng() % std::size(special)] : u(rng);
  return v;
}

// The same bits, NaN for NaN: a NaN's sign and payload are not held fixed (with two NaN
// operands x86 returns the first, and the compiler orders a commutative op's operands as
// it likes, in the interpreter as anywhere).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  return true;
}

struct Run {
  std::vector<std::vector<float>> stored;
  std::vector<float> out;
};

// Runs group over [begin, end) of its extent (rows, or values when flat), compiled or not,
// with outputs first filled with a pattern (values outside the range stay as they were).
Run run(const FusedGroup& grp, const std::vector<std::vector<float>>& ins, const std::vector<Shape>& in_shapes,
        const Shape& shape, std::int64_t begin, std::int64_t end, bool compiled) {
  std::vector<View> in;
  for (std::size_t j = 0; j < ins.size(); ++j) in.push_back(View{const_cast<float*>(ins[j].data()), &in_shapes[j]});
  Run r;
  const std::size_t total = std::size_t(numel(shape));
  r.out.assign(total, 7.f);
  r.stored.assign(grp.stored.size(), std::vector<float>(total, 7.f));
  std::vector<View> st;
  for (auto& s : r.stored) st.push_back(View{s.data(), &shape});
  const View out{r.out.data(), &shape};
  if (compiled) run_fused(grp, in, out, st, begin, end);
  else run_fused_interpreted(grp, in, out, st, begin, end < 0 ? fused_extent(grp, out) : end);
  return r;
}

}  // namespace

TEST_CASE("fuse_compiled: every compiled program gives the interpreter's bits") {
  if (compiled_count() == 0) return;  // a scalar build: no compiled kernels
  const std::int64_t W = std::int64_t(simd::width);
  std::mt19937 rng(5);
  const int before = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int i = 0; i < compiled_count(); ++i) {
      CAPTURE(i);
      CAPTURE(threads);
      // (rows, n): row groups take n in whole registers; flat ones any rows * n values.
      for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{1, W}, {3, 2 * W}, {37, 4 * W}, {2, 1}, {1, 3 * W + 5},
                             {301, 33}, {48, W}, {12, 4 * W}}) {
        std::string forms;
        const FusedGroup grp = compiled_group(i, rows, n, forms);
        if (!grp.flat && n % W != 0) continue;
        CAPTURE(rows);
        CAPTURE(n);
        CHECK(grp.compiled == i);
        const Shape shape = {rows, n};
        std::vector<std::vector<float>> ins;
        std::vector<Shape> in_shapes;
        for (char f : forms) {
          const Shape s = f == 'F' ? shape : f == 'B' ? Shape{n} : f == 'R' ? Shape{rows, 1}
                        : f == 'P' ? Shape{grp.lead.back(), n} : Shape{};
          in_shapes.push_back(s);
          ins.push_back(values(numel(s), rng));
        }
        const std::int64_t extent = grp.flat ? rows * n : rows;
        // The whole extent, and a part starting on a register (a batch slice's).
        for (auto [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, -1}, {W, extent - 1}}) {
          if (end >= 0 && end <= begin) continue;
          CAPTURE(begin);
          CAPTURE(end);
          const Run want = run(grp, ins, in_shapes, shape, begin, end, false);
          const Run got = run(grp, ins, in_shapes, shape, begin, end, true);
          CHECK(same_bits(got.out, want.out));
          REQUIRE(got.stored.size() == want.stored.size());
          for (std::size_t s = 0; s < got.stored.size(); ++s) CHECK(same_bits(got.stored[s], want.stored[s]));
        }
      }
    }
  }
  set_num_threads(before);
}
