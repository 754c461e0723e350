// Tests for ops/primitives/reduce.cpp: sum and max over every axis, with and without keepdim,
// through the Executor against double-precision references, on awkward sizes (SIMD body
// and scalar tail, contiguous and strided rows), and max over rows holding -inf.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/cpu/parallel.h"

using namespace gg;

namespace {

const std::int64_t kSizes[] = {1, 3, 7, 15, 17, 33, 1000};
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_values(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// Reference: reduce x (shape s) over `axis` in double. Returns values in the keepdim layout.
std::vector<double> reduce_ref(const std::vector<float>& x, const Shape& s, std::size_t axis, bool is_max,
                               std::vector<double>* abs_sum = nullptr) {
  std::int64_t outer = 1, inner = 1, n = s[axis];
  for (std::size_t d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<double> out(std::size_t(outer * inner));
  if (abs_sum) abs_sum->assign(out.size(), 0.0);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (std::int64_t j = 0; j < n; ++j) {
        const double v = x[std::size_t((o * n + j) * inner + i)];
        acc = is_max ? std::max(acc, v) : acc + v;
        if (abs_sum) (*abs_sum)[std::size_t(o * inner + i)] += std::abs(v);
      }
      out[std::size_t(o * inner + i)] = acc;
    }
  return out;
}

Shape reduced_shape(Shape s, std::size_t axis, bool keepdim) {
  if (keepdim) s[axis] = 1;
  else s.erase(s.begin() + std::ptrdiff_t(axis));
  return s;
}

// Runs sum or max over `axis` (given as `axis_arg`, possibly negative) and checks values.
void check_reduce(const Shape& s, const std::vector<float>& x, std::int64_t axis_arg, bool keepdim, bool is_max) {
  const std::size_t axis = std::size_t(axis_arg < 0 ? axis_arg + std::int64_t(s.size()) : axis_arg);
  INFO(std::string(is_max ? "max" : "sum") << " of " << to_string(s) << " over axis " << axis_arg
                                << std::string(keepdim ? " keepdim" : ""));
  Graph g;
  NodeId in = op::input(g, "x", s);
  NodeId y = is_max ? op::max(g, in, axis_arg, keepdim) : op::sum(g, in, axis_arg, keepdim);
  const Shape want_shape = reduced_shape(s, axis, keepdim);
  REQUIRE(g.node(y).shape == want_shape);
  CHECK(g.node(y).attrs.axis == std::int64_t(axis));
  ParamStore ps;
  Executor ex(g, {y}, ps);
  ex.set_input("x", Tensor::f32(s, x));
  ex.run();
  Tensor out = ex.get(y);
  REQUIRE(out.shape() == want_shape);
  std::vector<double> abs_sum;
  auto want = reduce_ref(x, s, axis, is_max, &abs_sum);
  REQUIRE(std::int64_t(want.size()) == out.numel());
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const float got = out.f()[i];
    bool ok;
    if (is_max) ok = got == float(want[i]);  // max is exact
    else ok = std::abs(double(got) - want[i]) <= 1e-6 * abs_sum[i] * std::max(1.0, std::log2(double(s[axis]))) + 1e-30;
    if (!ok && bad++ < 3) MESSAGE("at " << i << ": got " << got << ", want " << want[i]);
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("sum and max over each axis, with and without keepdim") {
  std::uint32_t seed = 1;
  for (std::int64_t n : kSizes) {
    const std::vector<Shape> shapes = {{n}, {3, n}, {n, 3}, {2, n, 5}, {2, 3, n}};
    for (const Shape& s : shapes) {
      auto x = random_values(numel(s), seed++);
      for (std::int64_t axis = 0; axis < std::int64_t(s.size()); ++axis)
        for (bool keepdim : {false, true})
          for (bool is_max : {false, true}) check_reduce(s, x, axis, keepdim, is_max);
      // Negative axes count from the end.
      check_reduce(s, x, -1, false, false);
      check_reduce(s, x, -1, true, true);
    }
  }
}

TEST_CASE("sum of a long row is accurate and reducing to a scalar works") {
  // 100000 values of 0.1: a naive float loop drifts by ~1e-3 relative; pairs of SIMD
  // accumulators keep it well under 1e-4.
  const Shape s{100000};
  std::vector<float> x(100000, 0.1f);
  Graph g;
  NodeId in = op::input(g, "x", s);
  NodeId y = op::sum(g, in, 0);
  CHECK(g.node(y).shape == Shape{});
  ParamStore ps;
  Executor ex(g, {y}, ps);
  ex.set_input("x", Tensor::f32(s, x));
  ex.run();
  CHECK(ex.scalar(y) == doctest::Approx(100000 * double(0.1f)).epsilon(1e-4));
}

TEST_CASE("max with -inf entries") {
  // Rows of 33 (two 16-wide registers and a tail): the maximum sits in the body, in the
  // tail, at the first position; one row is all -inf but one value; one row is all -inf.
  const std::int64_t R = 6, C = 33;
  std::vector<float> x(std::size_t(R * C), -kInf);
  auto at = [&](std::int64_t r, std::int64_t c) -> float& { return x[std::size_t(r * C + c)]; };
  for (std::int64_t c = 0; c < C; c += 2) at(0, c) = -float(c) - 1.f;  // row 0: max -1 at c=0
  at(1, 32) = -1000.f;                                                  // only one finite, in the tail
  at(2, 5) = 3.f;                                                       // only one finite, in the body
  at(3, 0) = -7.f;                                                      // only one finite, first
  // row 4 all -inf
  for (std::int64_t c = 0; c < C; ++c) at(5, c) = float(c % 7) - 3.f;  // ordinary: max 3
  at(5, 20) = -kInf;

  Graph g;
  NodeId in = op::input(g, "x", {R, C});
  NodeId rows = op::max(g, in, 1);        // contiguous rows
  NodeId cols = op::max(g, in, 0, true);  // strided: whole rows at a time
  ParamStore ps;
  Executor ex(g, {rows, cols}, ps);
  ex.set_input("x", Tensor::f32({R, C}, x));
  ex.run();
  const float want_rows[] = {-1.f, -1000.f, 3.f, -7.f, -kInf, 3.f};
  for (std::int64_t r = 0; r < R; ++r) {
    INFO("row " << r);
    CHECK(ex.value(rows).f()[r] == want_rows[r]);
  }
  CHECK(ex.get(cols).shape() == Shape{1, C});
  for (std::int64_t c = 0; c < C; ++c) {
    INFO("column " << c);
    float want = -kInf;
    for (std::int64_t r = 0; r < R; ++r) want = std::max(want, at(r, c));
    CHECK(ex.value(cols).f()[c] == want);
  }
  // Column 1 holds -inf in rows 0..4: the max is row 5's value.
  CHECK(ex.value(cols).f()[1] == -2.f);
}

TEST_CASE("max of all-negative rows is not clamped to 0, sum of all-zero rows is 0") {
  for (std::int64_t n : kSizes) {
    INFO("n = " << n);
    std::vector<float> x(std::size_t(2 * n));
    for (std::int64_t i = 0; i < n; ++i) {
      x[std::size_t(i)] = -5.f - float(i % 5);  // row 0: max -5
      x[std::size_t(n + i)] = 0.f;              // row 1: zeros
    }
    x[std::size_t(n - 1)] = -4.5f;  // the max is the last element (the tail when n > width)
    Graph g;
    NodeId in = op::input(g, "x", {2, n});
    NodeId mx = op::max(g, in, -1), sm = op::sum(g, in, -1);
    ParamStore ps;
    Executor ex(g, {mx, sm}, ps);
    ex.set_input("x", Tensor::f32({2, n}, x));
    ex.run();
    CHECK(ex.value(mx).f()[0] == -4.5f);
    CHECK(ex.value(mx).f()[1] == 0.f);
    CHECK(ex.value(sm).f()[1] == 0.f);
  }
}

// ---- argmax ---------------------------------------------------------------------------

namespace {

// Reference: index of the first largest entry along `axis` (keepdim layout).
std::vector<std::int32_t> argmax_ref(const std::vector<float>& x, const Shape& s, std::size_t axis) {
  std::int64_t outer = 1, inner = 1, n = s[axis];
  for (std::size_t d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<std::int32_t> out(std::size_t(outer * inner));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < n; ++j)
        if (x[std::size_t((o * n + j) * inner + i)] > x[std::size_t((o * n + best) * inner + i)]) best = j;
      out[std::size_t(o * inner + i)] = std::int32_t(best);
    }
  return out;
}

}  // namespace

TEST_CASE("argmax over each axis on awkward sizes: i32 indices, the first one on ties") {
  std::uint32_t seed = 50;
  for (std::int64_t n : kSizes) {
    const std::vector<Shape> shapes = {{n}, {3, n}, {n, 3}, {2, n, 5}};
    for (const Shape& s : shapes) {
      // Values from {0, 1, 2}: almost every row has its maximum several times.
      std::vector<float> x = random_values(numel(s), seed++);
      for (float& v : x) v = std::floor((v + 2.f) * 0.75f);
      for (std::int64_t axis = 0; axis < std::int64_t(s.size()); ++axis)
        for (bool keepdim : {false, true}) {
          INFO("argmax of " << to_string(s) << " over axis " << axis << (keepdim ? " keepdim" : ""));
          Graph g;
          NodeId in = op::input(g, "x", s);
          NodeId y = op::argmax(g, in, axis - std::int64_t(s.size()), keepdim);  // as a negative axis
          CHECK(g.node(y).dtype == DType::i32);
          CHECK(g.node(y).attrs.axis == axis);
          REQUIRE(g.node(y).shape == reduced_shape(s, std::size_t(axis), keepdim));
          ParamStore ps;
          Executor ex(g, {y}, ps);
          ex.set_input("x", Tensor::f32(s, x));
          ex.run();
          Tensor out = ex.get(y);
          REQUIRE(out.dtype() == DType::i32);
          const std::vector<std::int32_t> want = argmax_ref(x, s, std::size_t(axis));
          REQUIRE(out.numel() == std::int64_t(want.size()));
          std::int64_t bad = 0;
          for (std::size_t i = 0; i < want.size(); ++i)
            if (out.i()[i] != want[i] && bad++ < 3) MESSAGE("at " << i << ": got " << out.i()[i] << ", want " << want[i]);
          CHECK(bad == 0);
        }
    }
  }
}

TEST_CASE("argmax of rows that are all equal, all -inf, or hold NaN (NaN counts as largest, as in torch)") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {
      4, 4, 4, 4, 4,                  // all equal: 0
      -kInf, -kInf, -kInf, -kInf, -kInf,  // all -inf: 0
      1, 7, nan, 9, nan,              // first NaN: 2
      -kInf, 2, kInf, 3, kInf,        // first +inf: 2
      -3, -2, -1, -1, -5,             // tie in the middle: 2
  };
  Graph g;
  NodeId in = op::input(g, "x", {5, 5});
  NodeId y = op::argmax(g, in, 1);
  ParamStore ps;
  Executor ex(g, {y}, ps);
  ex.set_input("x", Tensor::f32({5, 5}, x));
  ex.run();
  const std::int32_t want[] = {0, 0, 2, 2, 2};
  for (int r = 0; r < 5; ++r) {
    INFO("row " << r);
    CHECK(ex.value(y).i()[r] == want[r]);
  }
}

TEST_CASE("argmax refuses an i32 operand, a scalar and an axis out of range") {
  Graph g;
  NodeId ids = op::input(g, "ids", {2, 3}, DType::i32);
  NodeId s = op::scalar(g, 1.f);
  NodeId x = op::input(g, "x", {2, 3});
  CHECK_THROWS_WITH_AS(op::argmax(g, ids, 1), doctest::Contains("operand must be f32"), GraphError);
  CHECK_THROWS_WITH_AS(op::argmax(g, s, 0), doctest::Contains("cannot reduce a scalar"), GraphError);
  CHECK_THROWS_WITH_AS(op::argmax(g, x, 2), doctest::Contains("axis 2 out of range"), GraphError);
}

TEST_CASE("a sum or max down long columns splits them between threads without changing a bit") {
  // (n, inner) and (2, n, inner) over axis n. Fewer than 128 rows: each column folds its n
  // values in order, as a float loop would, whichever thread has it. 128 rows or more: each
  // chunk of 64 rows folds in order, then the chunks' partials in order, whichever thread
  // has each chunk. Either way four registers of columns at a time go down the rows (then
  // one register, then single columns), and the bits are those of the loops below at any
  // thread count.
  const int saved = num_threads();
  for (std::int64_t n : {37, 128, 300})
    for (std::int64_t inner : {130, 200, 512, 4099})
      for (std::int64_t outer : {1, 2}) {
        const std::vector<float> x = random_values(outer * n * inner, std::uint32_t(n + inner + outer));
        const std::int64_t chunk = n >= 128 ? 64 : n;
        std::vector<float> want_sum(static_cast<std::size_t>(outer * inner)), want_max(want_sum.size());
        for (std::int64_t o = 0; o < outer; ++o)
          for (std::int64_t c = 0; c < inner; ++c) {
            const float* col = x.data() + o * n * inner + c;
            float s = 0.f, m = 0.f;
            for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
              float cs = col[r0 * inner], cm = col[r0 * inner];
              for (std::int64_t j = r0 + 1; j < std::min(n, r0 + chunk); ++j) {
                cs += col[j * inner];
                cm = cm > col[j * inner] ? cm : col[j * inner];
              }
              s = r0 == 0 ? cs : s + cs;
              m = r0 == 0 ? cm : (m > cm ? m : cm);
            }
            want_sum[std::size_t(o * inner + c)] = s;
            want_max[std::size_t(o * inner + c)] = m;
          }
        for (int threads : {1, 2, 3}) {
          INFO("n " << n << ", outer " << outer << ", inner " << inner << ", threads " << threads);
          set_num_threads(threads);
          Graph g;
          NodeId in = op::input(g, "x", {outer, n, inner});
          NodeId s = op::sum(g, in, 1, false), m = op::max(g, in, 1, false);
          ParamStore ps;
          Executor ex(g, {s, m}, ps);
          ex.set_input("x", std::span<const float>(x));
          ex.run();
          CHECK(ex.get(s).to_vector() == want_sum);
          CHECK(ex.get(m).to_vector() == want_max);
        }
      }
  set_num_threads(saved);
}

TEST_CASE("sum_to removes several leading axes in one reduction over their product") {
  Graph g;
  NodeId x = op::input(g, "x", {3, 5, 4});
  NodeId r = op::sum_to(g, x, {4});
  CHECK(g.node(r).op == OpKind::sum);
  const NodeId flat = g.node(r).inputs[0];
  CHECK(g.node(flat).op == OpKind::reshape);
  CHECK(g.node(flat).shape == Shape{15, 4});
  CHECK(g.node(flat).inputs[0] == x);
  const std::vector<float> v = random_values(60, 5);
  ParamStore ps;
  Executor ex(g, {r}, ps);
  ex.set_input("x", std::span<const float>(v));
  ex.run();
  const std::vector<float> got = ex.get(r).to_vector();
  for (std::size_t c = 0; c < 4; ++c) {
    double ref = 0;
    for (std::size_t row = 0; row < 15; ++row) ref += double(v[row * 4 + c]);
    CHECK(got[c] == doctest::Approx(ref).epsilon(1e-6));
  }
  // Axes kept as 1 are still summed with keepdim, after the leading ones.
  NodeId k = op::sum_to(g, x, {1, 4});
  CHECK(g.node(k).shape == Shape{1, 4});
}
