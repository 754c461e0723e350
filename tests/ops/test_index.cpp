// Tests for ops/primitives/index.cpp: gather along axis 0 (an embedding lookup) and axis 1 with
// 2-D indices, scatter_add with repeated indices (sums, not overwrites), against loops in
// the test; and an index out of range at run time is a GraphError naming the index.
#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/cpu/parallel.h"

using namespace gg;

namespace {

std::vector<float> iota_values(std::int64_t n, float start = 0.f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<std::int32_t> random_index(std::int64_t n, std::int32_t size, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> u(0, size - 1);
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

using gg::test::contains;

}  // namespace

TEST_CASE("gather axis 0 with 2-D indices: an embedding lookup") {
  for (std::int64_t C : {1, 3, 7, 15, 17, 33, 1000}) {
    INFO("C = " << C);
    const std::int64_t V = 11, B = 2, T = 5;
    Graph g;
    NodeId table = op::input(g, "wte", {V, C});
    NodeId idx = op::input(g, "idx", {B, T}, DType::i32);
    NodeId y = op::gather(g, table, idx);
    REQUIRE(g.node(y).shape == Shape{B, T, C});
    auto tv = iota_values(V * C);
    auto iv = random_index(B * T, std::int32_t(V), std::uint32_t(C));
    iv[0] = 0;
    iv[1] = std::int32_t(V - 1);  // both ends of the range
    iv[2] = iv[3];                // a repeat
    ParamStore ps;
    Executor ex(g, {y}, ps);
    ex.set_input("wte", Tensor::f32({V, C}, tv));
    ex.set_input("idx", std::span<const std::int32_t>(iv));
    ex.run();
    Tensor out = ex.get(y);
    std::int64_t bad = 0;
    for (std::int64_t p = 0; p < B * T; ++p)
      for (std::int64_t c = 0; c < C; ++c) bad += out.f()[p * C + c] != tv[std::size_t(iv[std::size_t(p)] * C + c)];
    CHECK(bad == 0);
  }
}

TEST_CASE("gather axis 1 with 2-D indices, and a negative axis") {
  const Shape xs{3, 6, 4};
  const std::int64_t I0 = 2, I1 = 5;
  auto xv = iota_values(numel(xs));
  auto iv = random_index(I0 * I1, 6, 42);
  for (std::int64_t axis : {1, -2}) {
    INFO("axis " << axis);
    Graph g;
    NodeId x = op::input(g, "x", xs);
    NodeId idx = op::constant(g, std::vector<float>(iv.begin(), iv.end()), {I0, I1}, DType::i32);
    NodeId y = op::gather(g, x, idx, axis);
    REQUIRE(g.node(y).shape == Shape{3, I0, I1, 4});
    CHECK(g.node(y).attrs.axis == 1);
    ParamStore ps;
    Executor ex(g, {y}, ps);
    ex.set_input("x", Tensor::f32(xs, xv));
    ex.run();
    Tensor out = ex.get(y);
    std::int64_t bad = 0;
    for (std::int64_t a = 0; a < 3; ++a)
      for (std::int64_t p = 0; p < I0 * I1; ++p)
        for (std::int64_t c = 0; c < 4; ++c)
          bad += out.f()[(a * I0 * I1 + p) * 4 + c] != xv[std::size_t((a * 6 + iv[std::size_t(p)]) * 4 + c)];
    CHECK(bad == 0);
  }
}

TEST_CASE("gather on the last axis and of i32 data") {
  // x: (2, 5) i32; index (3,) along axis 1 -> (2, 3)
  Graph g;
  NodeId x = op::input(g, "x", {2, 5}, DType::i32);
  NodeId idx = op::constant(g, {4, 0, 4}, {3}, DType::i32);
  NodeId y = op::gather(g, x, idx, 1);
  CHECK(g.node(y).dtype == DType::i32);
  CHECK(g.node(y).shape == Shape{2, 3});
  const std::vector<std::int32_t> xv = {10, 11, 12, 13, 14, 20, 21, 22, 23, 24};
  ParamStore ps;
  Executor ex(g, {y}, ps);
  ex.set_input("x", std::span<const std::int32_t>(xv));
  ex.run();
  const std::int32_t want[] = {14, 10, 14, 24, 20, 24};
  for (int i = 0; i < 6; ++i) CHECK(ex.value(y).i()[i] == want[i]);
}

TEST_CASE("scatter_add sums repeated indices") {
  SUBCASE("axis 0, 2-D index: the embedding gradient") {
    for (std::int64_t C : {1, 3, 17, 33, 1000}) {
      INFO("C = " << C);
      const std::int64_t V = 7, B = 3, T = 4;
      Graph g;
      NodeId src = op::input(g, "src", {B, T, C});
      NodeId idx = op::input(g, "idx", {B, T}, DType::i32);
      NodeId y = op::scatter_add(g, src, idx, 0, V);
      REQUIRE(g.node(y).shape == Shape{V, C});
      auto sv = iota_values(B * T * C, 1.f);
      auto iv = random_index(B * T, 3, std::uint32_t(C));  // only rows 0..2: many repeats, rows 3..6 stay 0
      ParamStore ps;
      Executor ex(g, {y}, ps);
      ex.set_input("src", Tensor::f32({B, T, C}, sv));
      ex.set_input("idx", std::span<const std::int32_t>(iv));
      ex.run();
      std::vector<double> want(std::size_t(V * C), 0.0);
      for (std::int64_t p = 0; p < B * T; ++p)
        for (std::int64_t c = 0; c < C; ++c) want[std::size_t(iv[std::size_t(p)] * C + c)] += sv[std::size_t(p * C + c)];
      Tensor out = ex.get(y);
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < V * C; ++i) bad += double(out.f()[i]) != want[std::size_t(i)];
      CHECK(bad == 0);
      // Running again gives the same (the output is cleared, not accumulated across runs).
      ex.run();
      CHECK(ex.get(y).to_vector() == out.to_vector());
    }
  }
  SUBCASE("axis 1, with 1 and 2 threads") {
    // src: (2, 4, 130), index (4,) = [1, 1, 0, 1] along axis 1, size 3 -> (2, 3, 130)
    const std::int64_t inner = 130;
    const std::vector<std::int32_t> iv = {1, 1, 0, 1};
    auto sv = iota_values(2 * 4 * inner);
    const int saved = num_threads();
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      INFO("threads = " << threads);
      Graph g;
      NodeId src = op::input(g, "src", {2, 4, inner});
      NodeId idx = op::constant(g, {1, 1, 0, 1}, {4}, DType::i32);
      NodeId y = op::scatter_add(g, src, idx, 1, 3);
      REQUIRE(g.node(y).shape == Shape{2, 3, inner});
      ParamStore ps;
      Executor ex(g, {y}, ps);
      ex.set_input("src", Tensor::f32({2, 4, inner}, sv));
      ex.run();
      Tensor out = ex.get(y);
      std::int64_t bad = 0;
      for (std::int64_t a = 0; a < 2; ++a)
        for (std::int64_t r = 0; r < 3; ++r)
          for (std::int64_t c = 0; c < inner; ++c) {
            double want = 0;
            for (std::int64_t k = 0; k < 4; ++k)
              if (iv[std::size_t(k)] == r) want += sv[std::size_t((a * 4 + k) * inner + c)];
            bad += double(out.f()[(a * 3 + r) * inner + c]) != want;
          }
      CHECK(bad == 0);
    }
    set_num_threads(saved);
  }
}

TEST_CASE("an index out of range at run time is a GraphError naming the index") {
  Graph g;
  NodeId table = op::input(g, "wte", {5, 3});
  NodeId idx = op::input(g, "idx", {4}, DType::i32);
  NodeId y, s;
  int line = 0, line_s = 0;
  {
    NameScope ns(g, "embed");
    y = op::gather(g, table, idx); line = __LINE__;
  }
  NodeId src = op::input(g, "src", {4, 3});
  s = op::scatter_add(g, src, idx, 0, 5); line_s = __LINE__;
  ParamStore ps;
  Executor ex(g, {y, s}, ps);
  ex.set_input("wte", Tensor::f32({5, 3}, iota_values(15)));
  ex.set_input("src", Tensor::f32({4, 3}, iota_values(12)));

  SUBCASE("too large") {
    const std::vector<std::int32_t> iv = {0, 4, 7, 1};
    ex.set_input("idx", std::span<const std::int32_t>(iv));
    try {
      ex.run();
      FAIL("no error");
    } catch (const GraphError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(contains(msg, "gather at test_index.cpp:" + std::to_string(line) + " ('embed')"));
      CHECK(contains(msg, "index 7 at position 2 is out of range [0, 5)"));
    }
  }
  SUBCASE("negative") {
    const std::vector<std::int32_t> iv = {0, -1, 2, 3};
    ex.set_input("idx", std::span<const std::int32_t>(iv));
    try {
      ex.run();
      FAIL("no error");
    } catch (const GraphError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(contains(msg, "index -1 at position 1 is out of range [0, 5)"));
    }
  }
  SUBCASE("in range runs; scatter_add checks its own indices") {
    const std::vector<std::int32_t> iv = {0, 4, 4, 1};
    ex.set_input("idx", std::span<const std::int32_t>(iv));
    CHECK_NOTHROW(ex.run());
    CHECK(ex.value(y).f()[3] == 12.f);  // row 4, column 0

    Graph g2;
    NodeId src2 = op::input(g2, "src", {2, 3});
    NodeId idx2 = op::constant(g2, {0, 3}, {2}, DType::i32);
    NodeId s2 = op::scatter_add(g2, src2, idx2, 0, 3); const int l2 = __LINE__;
    Executor ex2(g2, {s2}, ps);
    ex2.set_input("src", Tensor::f32({2, 3}, iota_values(6)));
    try {
      ex2.run();
      FAIL("no error");
    } catch (const GraphError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(contains(msg, "scatter_add at test_index.cpp:" + std::to_string(l2)));
      CHECK(contains(msg, "index 3 at position 1 is out of range [0, 3)"));
    }
  }
  CHECK(line_s > line);
}
