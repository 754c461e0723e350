// Tests for ops/primitives/matmul.cpp: batched matmul through the Executor against naive double
// loops, for all four transpose combinations, awkward sizes and broadcast batch dims
// ((2,3,M,K)@(K,N), (1,M,K)@(3,K,N), (M,K)@(2,K,N), ...). The GEMM itself is tested
// in test_gemm.cpp; this file checks how batches and transposes are mapped onto it.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/cpu/parallel.h"

using namespace gg;

namespace {

std::vector<float> random_values(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// Flat offset of the batch-th matrix of a tensor whose batch dims `own` broadcast to `batch`.
std::int64_t batch_offset(const Shape& batch, const Shape& own, std::int64_t b, std::int64_t mat) {
  std::int64_t off = 0, stride = mat;
  const int lead = int(batch.size()) - int(own.size());
  for (int d = int(batch.size()) - 1; d >= 0; --d) {
    const std::int64_t c = b % batch[std::size_t(d)];
    b /= batch[std::size_t(d)];
    const int od = d - lead;
    if (od >= 0) {
      if (own[std::size_t(od)] != 1) off += c * stride;
      stride *= own[std::size_t(od)];
    }
  }
  return off;
}

// Builds matmul(a, b, ta, tb) for a of shape sa and b of shape sb, runs it and compares
// with a naive double-precision loop.
void check_matmul(const Shape& sa, const Shape& sb, bool ta, bool tb, std::uint32_t seed) {
  INFO(to_string(sa) << std::string(ta ? "^T" : "") << " @ " << to_string(sb) << std::string(tb ? "^T" : ""));
  Graph g;
  NodeId a = op::input(g, "a", sa);
  NodeId b = op::input(g, "b", sb);
  NodeId c = op::matmul(g, a, b, ta, tb);
  const std::int64_t M = ta ? sa.back() : sa[sa.size() - 2];
  const std::int64_t K = ta ? sa[sa.size() - 2] : sa.back();
  const std::int64_t N = tb ? sb[sb.size() - 2] : sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = *op::broadcast_shapes(ba, bb);
  Shape want_shape = batch;
  want_shape.push_back(M);
  want_shape.push_back(N);
  REQUIRE(g.node(c).shape == want_shape);

  auto va = random_values(numel(sa), seed);
  auto vb = random_values(numel(sb), seed + 1000);
  ParamStore ps;
  Executor ex(g, {c}, ps);
  ex.set_input("a", Tensor::f32(sa, va));
  ex.set_input("b", Tensor::f32(sb, vb));
  ex.run();
  Tensor out = ex.get(c);
  REQUIRE(out.shape() == want_shape);

  std::int64_t bad = 0;
  const std::int64_t lda = sa.back(), ldb = sb.back();
  for (std::int64_t bi = 0; bi < numel(batch); ++bi) {
    const float* A = va.data() + batch_offset(batch, ba, bi, M * K);
    const float* B = vb.data() + batch_offset(batch, bb, bi, K * N);
    const float* C = out.f() + bi * M * N;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double acc = 0, mag = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          const double x = ta ? A[k * lda + i] : A[i * lda + k];
          const double y = tb ? B[j * ldb + k] : B[k * ldb + j];
          acc += x * y;
          mag += std::abs(x * y);
        }
        const double got = C[i * N + j];
        if (!(std::abs(got - acc) <= 2e-6 * mag + 1e-6)) {
          if (bad++ < 3) MESSAGE("batch " << bi << " C(" << i << ", " << j << ") = " << got << ", want " << acc);
        }
      }
  }
  CHECK(bad == 0);
}

// Returns `s` with its last two dims swapped when `t`: the stored layout for a transposed operand.
Shape stored(Shape s, bool t) {
  if (t) std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

}  // namespace

TEST_CASE("matmul: 2-D, all transposes, awkward sizes") {
  std::uint32_t seed = 1;
  for (std::int64_t M : {1, 3, 17})
    for (std::int64_t K : {1, 7, 33})
      for (std::int64_t N : {1, 15, 33})
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          check_matmul(stored({M, K}, ta), stored({K, N}, tb), ta, tb, seed++);
        }
  // A long inner dimension and a wide output.
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    check_matmul(stored({3, 1000}, ta), stored({1000, 5}, tb), ta, tb, seed++);
    check_matmul(stored({7, 17}, ta), stored({17, 1000}, tb), ta, tb, seed++);
  }
}

TEST_CASE("matmul: batch dims broadcast, all transposes") {
  struct Case {
    Shape a, b;  // batch dims only; M, K, N appended below
  };
  const Case cases[] = {
      {{2, 3}, {}},         // (2,3,M,K) @ (K,N): the shared-weight path
      {{1}, {3}},           // (1,M,K) @ (3,K,N)
      {{}, {2}},            // (M,K) @ (2,K,N)
      {{4}, {4}},           // same batch
      {{2, 1}, {3}},        // (2,1,M,K) @ (3,K,N) -> (2,3,M,N)
      {{3}, {2, 1}},        // (3,M,K) @ (2,1,K,N) -> (2,3,M,N)
      {{2, 1, 3}, {1, 2, 1}},
      {{5}, {}},
  };
  std::uint32_t seed = 500;
  for (const Case& c : cases)
    for (auto [M, K, N] : {std::array<std::int64_t, 3>{3, 7, 5}, std::array<std::int64_t, 3>{17, 33, 1},
                           std::array<std::int64_t, 3>{1, 15, 17}})
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        Shape sa = c.a, sb = c.b;
        for (auto d : stored({M, K}, ta)) sa.push_back(d);
        for (auto d : stored({K, N}, tb)) sb.push_back(d);
        check_matmul(sa, sb, ta, tb, seed++);
      }
}

TEST_CASE("matmul: attention-shaped products with 1 and 2 threads") {
  // (B, H, T, hs) @ (B, H, T, hs)^T and the large shared-weight projection, big enough
  // that the batch loop and the GEMM both split across threads.
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    INFO("threads = " << threads);
    check_matmul({2, 3, 33, 16}, {2, 3, 33, 16}, false, true, 7);
    check_matmul({2, 3, 33, 33}, {2, 3, 33, 16}, false, false, 8);
    check_matmul({2, 64, 96}, {96, 80}, false, false, 9);
    check_matmul({2, 96, 64}, {80, 96}, true, true, 10);
  }
  set_num_threads(saved);
}

TEST_CASE("matmul: known small product") {
  // [[1, 2, 3], [4, 5, 6]] @ [[1, 0], [0, 1], [1, 1]] = [[4, 5], [10, 11]]
  Graph g;
  NodeId a = op::constant(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  NodeId b = op::constant(g, {1, 0, 0, 1, 1, 1}, {3, 2});
  NodeId c = op::matmul(g, a, b);
  NodeId ct = op::matmul(g, b, a, true, true);  // (a @ b)^T
  ParamStore ps;
  Executor ex(g, {c, ct}, ps);
  ex.run();
  const float want[] = {4, 5, 10, 11}, want_t[] = {4, 10, 5, 11};
  for (int i = 0; i < 4; ++i) {
    CHECK(ex.value(c).f()[i] == want[i]);
    CHECK(ex.value(ct).f()[i] == want_t[i]);
  }
}
