// Tests for ops/primitives/movement.cpp: reshape (with -1), permute (several permutations including
// the attention one, (0, 2, 1, 3)), expand, slice (negative begin/end) and concat on each
// axis, through the Executor against index arithmetic done in the test, for f32 and i32.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"

using namespace gg;

namespace {

const std::int64_t kSizes[] = {1, 3, 7, 15, 17, 33, 1000};

// Distinct values 0, 1, 2, ... so that any misplaced element is caught.
std::vector<float> iota_values(std::int64_t n, float start = 0.f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<std::int64_t> unravel(std::int64_t i, const Shape& s) {
  std::vector<std::int64_t> idx(s.size());
  for (int d = int(s.size()) - 1; d >= 0; --d) {
    idx[std::size_t(d)] = i % s[std::size_t(d)];
    i /= s[std::size_t(d)];
  }
  return idx;
}

std::int64_t ravel(const std::vector<std::int64_t>& idx, const Shape& s) {
  std::int64_t i = 0;
  for (std::size_t d = 0; d < s.size(); ++d) i = i * s[d] + idx[d];
  return i;
}

// Runs the plan for `out` with input "x" fed `x` and returns the output.
Tensor eval(const Graph& g, NodeId out, const Tensor& x) {
  ParamStore ps;
  Executor ex(g, {out}, ps);
  ex.set_input("x", x);
  ex.run();
  return ex.get(out);
}

}  // namespace

TEST_CASE("reshape keeps the values and infers -1") {
  for (std::int64_t n : kSizes) {
    INFO("n = " << n);
    Graph g;
    NodeId x = op::input(g, "x", {2, n, 3});
    NodeId r1 = op::reshape(g, x, {-1, 3});
    NodeId r2 = op::reshape(g, x, {2, -1});
    NodeId r3 = op::reshape(g, r2, {6 * n});
    CHECK(g.node(r1).shape == Shape{2 * n, 3});
    CHECK(g.node(r2).shape == Shape{2, 3 * n});
    CHECK(g.node(r3).shape == Shape{6 * n});
    auto v = iota_values(6 * n);
    ParamStore ps;
    Executor ex(g, {r1, r2, r3}, ps);
    ex.set_input("x", Tensor::f32({2, n, 3}, v));
    ex.run();
    for (NodeId r : {r1, r2, r3}) CHECK(ex.get(r).to_vector() == v);
  }
  // Reshaping to the same shape is the node itself; i32 stays i32.
  Graph g;
  NodeId x = op::input(g, "x", {4, 6}, DType::i32);
  CHECK(op::reshape(g, x, {4, 6}) == x);
  NodeId r = op::reshape(g, x, {3, -1, 2});
  CHECK(g.node(r).shape == Shape{3, 4, 2});
  CHECK(g.node(r).dtype == DType::i32);
  std::vector<std::int32_t> iv(24);
  std::iota(iv.begin(), iv.end(), -10);
  Tensor out = eval(g, r, Tensor::i32({4, 6}, iv));
  for (int i = 0; i < 24; ++i) CHECK(out.i()[i] == iv[std::size_t(i)]);
}

TEST_CASE("permute moves every element to its permuted index") {
  struct Case {
    Shape x, perm;
  };
  std::vector<Case> cases = {
      {{2, 3, 4, 5}, {0, 2, 1, 3}},  // (B, T, H, hs) -> (B, H, T, hs)
      {{2, 3, 4, 5}, {0, 1, 3, 2}},  // transpose the last two (contiguous rows gone)
      {{2, 3, 4, 5}, {3, 2, 1, 0}},
      {{2, 3, 4, 5}, {1, 3, 0, 2}},
      {{2, 3, 4, 5}, {0, 1, 2, 3}},  // identity
      {{3, 4, 5}, {2, 0, 1}},
      {{7}, {0}},
      // The attention's head split and merge at sizes where the rows are walked in input
      // order (the split) and in output order (the merge), in chunks split between threads
      // mid-row-index; rows of 20 and 3 values take the short-row tail.
      {{12, 64, 4, 32}, {0, 2, 1, 3}},
      {{12, 4, 64, 32}, {0, 2, 1, 3}},
      {{3, 50, 40, 20}, {0, 2, 1, 3}},
      {{5, 7, 33, 3}, {0, 2, 1, 3}},
  };
  for (std::int64_t n : kSizes) {
    cases.push_back({{n, 3}, {1, 0}});
    cases.push_back({{3, n}, {1, 0}});
    cases.push_back({{2, n, 3}, {1, 0, 2}});
  }
  for (const Case& c : cases)
    for (DType dt : {DType::f32, DType::i32}) {
      INFO(to_string(c.x) << " perm " << to_string(c.perm) << " " << std::string(to_string(dt)));
      Graph g;
      NodeId x = op::input(g, "x", c.x, dt);
      NodeId p = op::permute(g, x, c.perm);
      Shape os(c.x.size());
      for (std::size_t i = 0; i < c.x.size(); ++i) os[i] = c.x[std::size_t(c.perm[i])];
      REQUIRE(g.node(p).shape == os);
      CHECK(g.node(p).dtype == dt);
      const std::int64_t total = numel(c.x);
      std::vector<std::int32_t> iv(static_cast<std::size_t>(total));
      std::iota(iv.begin(), iv.end(), 1);
      Tensor in = dt == DType::f32 ? Tensor::f32(c.x, iota_values(total, 1.f)) : Tensor::i32(c.x, iv);
      Tensor out = eval(g, p, in);
      std::int64_t bad = 0;
      for (std::int64_t o = 0; o < total; ++o) {
        auto oi = unravel(o, os);
        std::vector<std::int64_t> xi(c.x.size());
        for (std::size_t d = 0; d < c.x.size(); ++d) xi[std::size_t(c.perm[d])] = oi[d];
        const std::int64_t src = ravel(xi, c.x);
        const bool ok = dt == DType::f32 ? out.f()[o] == float(src + 1) : out.i()[o] == std::int32_t(src + 1);
        bad += !ok;
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("expand repeats along broadcast dims") {
  struct Case {
    Shape x, to;
  };
  std::vector<Case> cases = {
      {{3, 1}, {2, 3, 4}},
      {{}, {5}},
      {{1}, {2, 2}},
      {{2, 1, 3}, {2, 4, 3}},
      {{1, 1}, {3, 1}},
  };
  for (std::int64_t n : kSizes) {
    cases.push_back({{1, n}, {4, n}});
    cases.push_back({{n}, {2, 3, n}});
    cases.push_back({{n, 1}, {n, 5}});
  }
  for (const Case& c : cases)
    for (DType dt : {DType::f32, DType::i32}) {
      INFO(to_string(c.x) << " -> " << to_string(c.to) << " " << std::string(to_string(dt)));
      Graph g;
      NodeId x = op::input(g, "x", c.x, dt);
      NodeId e = op::expand(g, x, c.to);
      REQUIRE(g.node(e).shape == c.to);
      const std::int64_t nx = numel(c.x);
      std::vector<std::int32_t> iv(static_cast<std::size_t>(nx));
      std::iota(iv.begin(), iv.end(), 100);
      Tensor in = dt == DType::f32 ? Tensor::f32(c.x, iota_values(nx, 100.f)) : Tensor::i32(c.x, iv);
      Tensor out = eval(g, e, in);
      std::int64_t bad = 0;
      const int lead = int(c.to.size() - c.x.size());
      for (std::int64_t o = 0; o < numel(c.to); ++o) {
        auto oi = unravel(o, c.to);
        std::vector<std::int64_t> xi(c.x.size());
        for (std::size_t d = 0; d < c.x.size(); ++d) xi[d] = c.x[d] == 1 ? 0 : oi[d + std::size_t(lead)];
        const std::int64_t src = ravel(xi, c.x);
        const bool ok = dt == DType::f32 ? out.f()[o] == float(100 + src) : out.i()[o] == std::int32_t(100 + src);
        bad += !ok;
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("slice along each axis, with negative begin and end") {
  const Shape s{4, 5, 6};
  const auto v = iota_values(numel(s));
  struct Case {
    std::int64_t axis, begin, end, want_begin, want_end;
  };
  const Case cases[] = {
      {0, 1, 3, 1, 3},   {1, 0, 5, 0, 5},  {2, 2, 6, 2, 6},   {0, -3, -1, 1, 3}, {1, -5, 2, 0, 2},
      {2, 1, -1, 1, 5},  {-1, 0, 1, 0, 1}, {-2, -1, 5, 4, 5}, {2, 3, 3, 3, 3},   {0, 0, -4, 0, 0},
  };
  for (const Case& c : cases) {
    INFO("axis " << c.axis << " [" << c.begin << ", " << c.end << ")");
    Graph g;
    NodeId x = op::input(g, "x", s);
    NodeId y = op::slice(g, x, c.axis, c.begin, c.end);
    const std::size_t ax = std::size_t(c.axis < 0 ? c.axis + 3 : c.axis);
    Shape os = s;
    os[ax] = c.want_end - c.want_begin;
    REQUIRE(g.node(y).shape == os);
    CHECK(g.node(y).attrs.begin == c.want_begin);
    CHECK(g.node(y).attrs.end == c.want_end);
    if (numel(os) == 0) continue;  // an empty slice has nothing to compare
    Tensor out = eval(g, y, Tensor::f32(s, v));
    std::int64_t bad = 0;
    for (std::int64_t o = 0; o < numel(os); ++o) {
      auto idx = unravel(o, os);
      idx[ax] += c.want_begin;
      bad += out.f()[o] != v[std::size_t(ravel(idx, s))];
    }
    CHECK(bad == 0);
  }
  // Long rows (SIMD-sized and not) and i32.
  for (std::int64_t n : kSizes) {
    INFO("n = " << n);
    Graph g;
    NodeId x = op::input(g, "x", {3, n}, DType::i32);
    NodeId y = op::slice(g, x, 1, -n, n);  // everything
    NodeId z = op::slice(g, x, 0, -2, -1);  // the middle row
    std::vector<std::int32_t> iv(static_cast<std::size_t>(3 * n));
    std::iota(iv.begin(), iv.end(), 0);
    ParamStore ps;
    Executor ex(g, {y, z}, ps);
    ex.set_input("x", Tensor::i32({3, n}, iv));
    ex.run();
    Tensor ty = ex.get(y), tz = ex.get(z);
    CHECK(ty.shape() == Shape{3, n});
    CHECK(tz.shape() == Shape{1, n});
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < 3 * n; ++i) bad += ty.i()[i] != iv[std::size_t(i)];
    for (std::int64_t i = 0; i < n; ++i) bad += tz.i()[i] != iv[std::size_t(n + i)];
    CHECK(bad == 0);
  }
}

TEST_CASE("concat along each axis") {
  // Three inputs of shape s with s[axis] replaced by 1, 2 and 3.
  const Shape base{2, 3, 4};
  for (std::int64_t axis : {0, 1, 2, -1})
    for (DType dt : {DType::f32, DType::i32}) {
      const std::size_t ax = std::size_t(axis < 0 ? axis + 3 : axis);
      INFO("axis " << axis << " " << std::string(to_string(dt)));
      Graph g;
      std::vector<NodeId> xs;
      std::vector<Shape> shapes;
      for (std::int64_t len : {1, 2, 3}) {
        Shape s = base;
        s[ax] = len;
        shapes.push_back(s);
        xs.push_back(op::input(g, "x" + std::to_string(len), s, dt));
      }
      NodeId y = op::concat(g, xs, axis);
      Shape os = base;
      os[ax] = 6;
      REQUIRE(g.node(y).shape == os);
      CHECK(g.node(y).dtype == dt);
      ParamStore ps;
      Executor ex(g, {y}, ps);
      for (std::size_t k = 0; k < 3; ++k) {
        const std::int64_t m = numel(shapes[k]);
        std::vector<std::int32_t> iv(static_cast<std::size_t>(m));
        std::iota(iv.begin(), iv.end(), std::int32_t(1000 * (k + 1)));
        if (dt == DType::f32) ex.set_input("x" + std::to_string(k + 1), Tensor::f32(shapes[k], iota_values(m, 1000.f * float(k + 1))));
        else ex.set_input("x" + std::to_string(k + 1), Tensor::i32(shapes[k], iv));
      }
      ex.run();
      Tensor out = ex.get(y);
      std::int64_t bad = 0;
      for (std::int64_t o = 0; o < numel(os); ++o) {
        auto idx = unravel(o, os);
        // Which input holds this position along the axis: [0,1) -> 0, [1,3) -> 1, [3,6) -> 2.
        const std::int64_t at = idx[ax];
        const std::size_t k = at < 1 ? 0 : at < 3 ? 1 : 2;
        idx[ax] = at - (k == 0 ? 0 : k == 1 ? 1 : 3);
        const std::int64_t want = 1000 * std::int64_t(k + 1) + ravel(idx, shapes[k]);
        bad += dt == DType::f32 ? out.f()[o] != float(want) : out.i()[o] != std::int32_t(want);
      }
      CHECK(bad == 0);
    }
  // A single input is a copy; long rows.
  for (std::int64_t n : kSizes) {
    Graph g;
    NodeId a = op::input(g, "x", {2, n});
    NodeId c1 = op::concat(g, {a}, 0);
    NodeId c2 = op::concat(g, {a, a}, 1);
    auto v = iota_values(2 * n);
    ParamStore ps;
    Executor ex(g, {c1, c2}, ps);
    ex.set_input("x", Tensor::f32({2, n}, v));
    ex.run();
    CHECK(ex.get(c1).to_vector() == v);
    Tensor t2 = ex.get(c2);
    REQUIRE(t2.shape() == Shape{2, 2 * n});
    std::int64_t bad = 0;
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t j = 0; j < 2 * n; ++j) bad += t2.f()[r * 2 * n + j] != v[std::size_t(r * n + j % n)];
    CHECK(bad == 0);
  }
}
