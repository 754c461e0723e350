// Tests for ops/cpu/gemm.cpp: the packed GEMM against the plain triple loop (gemm_reference)
// over all transpose combinations, awkward sizes, padded leading dimensions, alpha/beta
// (including beta = 0 over a NaN-filled C) and 1 or 2 threads. No timing here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <random>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cpu/parallel.h"

namespace {

using i64 = std::int64_t;

struct Case {
  bool ta, tb;
  i64 M, N, K;
  float alpha, beta;
  i64 pad = 0;           // extra floats at the end of every row (leading dim > row width)
  bool nan_c = false;    // fill C with NaN (only meaningful with beta == 0)
};

// Runs gemm and gemm_reference on the same random inputs and checks every element.
void check(const Case& c, std::uint32_t seed = 1) {
  INFO("ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N << " K=" << c.K
             << " alpha=" << c.alpha << " beta=" << c.beta << " pad=" << c.pad
             << " nan_c=" << c.nan_c << " threads=" << gg::num_threads());
  // A: (M, K) or (K, M); B: (K, N) or (N, K); C: (M, N); each row padded by c.pad.
  const i64 a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const i64 b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const i64 lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> A(std::size_t(std::max<i64>(1, a_rows * lda)));
  std::vector<float> B(std::size_t(std::max<i64>(1, b_rows * ldb)));
  std::vector<float> C0(std::size_t(std::max<i64>(1, c.M * ldc)));
  for (auto& x : A) x = u(rng);
  for (auto& x : B) x = u(rng);
  for (auto& x : C0) x = c.nan_c ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  std::vector<float> C = C0, R = C0;

  gg::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
  gg::gemm_reference(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                     R.data(), ldc);

  // |a|, |b| <= 1: float accumulation error grows at most like K * eps per element.
  const float tol = 1e-6f * float(std::max<i64>(c.K, 1)) * std::max(1.f, std::abs(c.alpha)) + 1e-6f;
  i64 bad = 0;
  for (i64 i = 0; i < c.M; ++i) {
    for (i64 j = 0; j < ldc; ++j) {
      const float got = C[std::size_t(i * ldc + j)], want = R[std::size_t(i * ldc + j)];
      if (j >= c.N) {  // padding past the row must be left alone (NaN stays NaN)
        const float orig = C0[std::size_t(i * ldc + j)];
        if (!(got == orig || (std::isnan(got) && std::isnan(orig)))) ++bad;
        continue;
      }
      if (!(std::abs(got - want) <= tol)) {  // also catches NaN
        if (bad < 5) {
          MESSAGE("C(" << i << ", " << j << ") = " << got << ", want " << want);
        }
        ++bad;
      }
    }
  }
  CHECK(bad == 0);
}

// Every transpose combination for one size and one alpha/beta setting.
void check_all_transposes(i64 M, i64 N, i64 K, float alpha, float beta, i64 pad = 0,
                          bool nan_c = false) {
  for (int t = 0; t < 4; ++t) check({bool(t & 1), bool(t & 2), M, N, K, alpha, beta, pad, nan_c});
}

// Runs body with 1 and then 2 threads, restoring the thread count afterwards.
template <class F>
void with_threads(F body) {
  const int saved = gg::num_threads();
  for (int n : {1, 2}) {
    gg::set_num_threads(n);
    body();
  }
  gg::set_num_threads(saved);
}

const i64 kAwkward[] = {1, 3, 7, 15, 17, 33, 100, 257};

}  // namespace

TEST_CASE("gemm matches the reference on awkward sizes, all transposes") {
  with_threads([] {
    for (i64 M : kAwkward)
      for (i64 N : kAwkward)
        for (i64 K : {i64(1), i64(17), i64(257)}) check_all_transposes(M, N, K, 1.f, 0.f);
    // Sweep K on its own (crosses the KC blocking) with a mid-sized M and N.
    for (i64 K : kAwkward) check_all_transposes(33, 100, K, 1.f, 0.f);
    for (i64 K : {i64(255), i64(256), i64(511), i64(513), i64(768)})
      check_all_transposes(37, 71, K, 1.f, 0.f);
  });
}

TEST_CASE("gemm handles alpha, beta and beta = 0 over NaN") {
  with_threads([] {
    SUBCASE("alpha and beta") {
      for (float alpha : {1.f, -0.5f, 2.f})
        for (float beta : {0.f, 1.f, 0.25f, -1.f}) {
          check_all_transposes(17, 33, 15, alpha, beta);
          check_all_transposes(100, 257, 100, alpha, beta);
        }
    }
    SUBCASE("beta = 0 ignores NaN in C") {
      for (i64 s : kAwkward) check_all_transposes(s, s, s, 1.f, 0.f, 0, true);
      check_all_transposes(257, 100, 300, 0.5f, 0.f, 3, true);
    }
    SUBCASE("alpha = 0 and K = 0 scale C by beta") {
      check_all_transposes(7, 33, 15, 0.f, 0.5f);
      check_all_transposes(7, 33, 0, 1.f, 0.5f);
      check_all_transposes(7, 33, 0, 1.f, 0.f, 0, true);
    }
  });
}

TEST_CASE("gemm respects leading dimensions larger than the row") {
  with_threads([] {
    for (i64 pad : {1, 5, 16})
      for (i64 s : {i64(3), i64(17), i64(100)}) {
        check_all_transposes(s, s + 4, s + 9, 1.f, 0.f, pad);
        check_all_transposes(s + 9, s, s + 4, -1.5f, 0.5f, pad, false);
      }
    // Past the direct size, so the blocked and row-stealing paths read the padded rows (on
    // AMD's AVX-512 cores a row-major A in place, its rows lda apart), over two depth panels.
    check_all_transposes(257, 130, 300, -1.5f, 0.5f, 5);
    check_all_transposes(130, 257, 300, 1.f, 0.f, 16, true);
  });
}

TEST_CASE("gemm on the project's shapes") {
  with_threads([] {
    check({false, false, 768, 512, 128, 1.f, 0.f});   // (768x128)@(128x512)
    check({false, false, 768, 128, 512, 1.f, 0.f});   // (768x512)@(512x128)
    check({true, false, 128, 512, 768, 1.f, 1.f});    // A^T@B, weight gradient, accumulate
    check({false, true, 768, 128, 512, 1.f, 0.f});    // dX = dY @ W^T
    check({false, false, 64, 64, 32, 1.f, 0.f});      // attention scores
    check({false, true, 64, 64, 32, 0.125f, 0.f});    // q @ k^T, scaled
    check({false, false, 64, 32, 64, 1.f, 0.f});      // att @ v
    // Past DIRECT with a transposed A read in place; the 16-column transposing packs with
    // partial slivers, depths that are not a multiple of 16 and padded rows.
    check({true, false, 100, 70, 600, 1.f, 0.f, 3});
    check({true, true, 130, 50, 700, 0.5f, 1.f, 1});
    check({false, true, 300, 45, 700, 1.f, 0.5f, 5});
    check({false, false, 299, 77, 530, 1.f, 0.f, 2});
  });
}

TEST_CASE("gemm called from inside parallel_for runs serially and correctly") {
  const int saved = gg::num_threads();
  gg::set_num_threads(2);
  // 4 independent (100x257)@(257x100) products, one per index.
  const i64 M = 100, N = 100, K = 257, count = 4;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> A(std::size_t(count * M * K)), B(std::size_t(count * K * N));
  std::vector<float> C(std::size_t(count * M * N)), R(std::size_t(count * M * N));
  for (auto& x : A) x = u(rng);
  for (auto& x : B) x = u(rng);
  gg::parallel_for(count, 1, [&](i64 b0, i64 b1) {
    for (i64 b = b0; b < b1; ++b)
      gg::gemm(false, false, M, N, K, 1.f, A.data() + b * M * K, K, B.data() + b * K * N, N, 0.f,
               C.data() + b * M * N, N);
  });
  for (i64 b = 0; b < count; ++b)
    gg::gemm_reference(false, false, M, N, K, 1.f, A.data() + b * M * K, K, B.data() + b * K * N,
                       N, 0.f, R.data() + b * M * N, N);
  float worst = 0.f;
  for (std::size_t i = 0; i < C.size(); ++i) worst = std::max(worst, std::abs(C[i] - R[i]));
  CHECK(worst <= 1e-6f * float(K));
  gg::set_num_threads(saved);
}

TEST_CASE("gemm gives bit-identical results on 1, 2 and 3 threads and any split, call after call") {
  // Threads split C into disjoint stripes and every element is summed in the same order,
  // so neither the thread count, nor where the threads' shares put the split, nor the
  // pool's spin/sleep hand-offs may change a single bit.
  // Many back-to-back calls, with thread-count changes in between, also stress the pool.
  const int saved = gg::num_threads();
  const i64 M = 200, N = 130, K = 300;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> A(std::size_t(M * K)), B(std::size_t(K * N));
  for (auto& x : A) x = u(rng);
  for (auto& x : B) x = u(rng);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const i64 lda = ta ? M : K, ldb = tb ? K : N;
    gg::set_num_threads(1);
    std::vector<float> want(std::size_t(M * N));
    gg::gemm(ta, tb, M, N, K, 1.f, A.data(), lda, B.data(), ldb, 0.f, want.data(), N);
    int mismatched_calls = 0;
    for (int rep = 0; rep < 60; ++rep) {
      gg::set_num_threads(1 + rep % 3);
      if (rep % 3 == 1) gg::set_thread_shares(rep % 9 == 1 ? std::vector<double>{1, 3} : rep % 9 == 4 ? std::vector<double>{3, 1} : std::vector<double>{});
      std::vector<float> C(std::size_t(M * N), -1.f);
      gg::gemm(ta, tb, M, N, K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), N);
      if (C != want) ++mismatched_calls;
    }
    CHECK(mismatched_calls == 0);
  }
  gg::set_num_threads(saved);
}

TEST_CASE("gemm's row blocks give the same bits whoever runs them, when threads take each other's") {
  // Two or three threads on this machine's cores (two in CI): one is often slower, and the
  // others take blocks from the back of its share. Blocks of several depth slices (K past
  // 256) or column panels (N past 1024) must still add up slice after slice. More rows
  // than columns (in tiles, for every vector width) so that the rows are what is split.
  struct Case {
    i64 M, N, K;
  };
  for (const Case& c : {Case{1100, 300, 520}, Case{1200, 1030, 40}}) {
    INFO("M " << c.M << " N " << c.N << " K " << c.K);
    const int saved = gg::num_threads();
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> A(std::size_t(c.M * c.K)), B(std::size_t(c.K * c.N)), C0(std::size_t(c.M * c.N), 0.5f);
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
    gg::set_num_threads(1);
    std::vector<float> want = C0;
    gg::gemm(false, true, c.M, c.N, c.K, 0.75f, A.data(), c.K, B.data(), c.K, 0.5f, want.data(), c.N);
    const std::uint64_t before = gg::gemm_stolen_blocks();
    int mismatched_calls = 0;
    for (int rep = 0; rep < 12; ++rep) {
      gg::set_num_threads(2 + rep % 2);
      std::vector<float> C = C0;
      gg::gemm(false, true, c.M, c.N, c.K, 0.75f, A.data(), c.K, B.data(), c.K, 0.5f, C.data(), c.N);
      if (C != want) ++mismatched_calls;
    }
    gg::set_num_threads(saved);
    CHECK(mismatched_calls == 0);
    CHECK(gg::gemm_stolen_blocks() > before);  // the stealing did happen
    check({false, true, c.M, c.N, c.K, 0.75f, 0.5f});  // and the values are the product's
  }
}

TEST_CASE("a weight gradient's sum in two halves: the shape's split, the same bits on any threads") {
  // x^T @ dy over 512 rows or more is summed in two halves of the rows (gemm_depth_split),
  // whichever threads run them: C = (beta C + alpha * first half) + alpha * second half, each
  // half in passes of gemm_depth_block from its own start. Built by hand from calls of one
  // pass each (as ops/passes/masked.cpp does), that must give the same bits; and every thread count
  // and split of the work between the threads must give them too, with alpha, beta, padded
  // rows and short last passes.
  struct Case {
    i64 M, N, K, pad;
  };
  const int saved = gg::num_threads();
  for (const Case& c : {Case{128, 512, 768, 0}, Case{100, 70, 600, 3}, Case{37, 250, 1000, 5}, Case{512, 128, 700, 0}}) {
    INFO("M " << c.M << " N " << c.N << " K " << c.K << " pad " << c.pad);
    const i64 K0 = gg::gemm_depth_split(true, false, c.M, c.N, c.K);
    REQUIRE(K0 > 0);
    CHECK(gg::gemm_depth_split(false, false, c.M, c.N, c.K) == 0);  // only x^T @ dy
    CHECK(gg::gemm_depth_split(true, false, c.M, c.N, 500) == 0);    // of two depth blocks or more
    const i64 lda = c.M + c.pad, ldb = c.N + c.pad, ldc = c.N + c.pad;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> A(std::size_t(c.K * lda)), B(std::size_t(c.K * ldb)), C0(std::size_t(c.M * ldc));
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
    for (auto& x : C0) x = u(rng);
    // Terms [k0, k1) in passes of one depth block from k0, onto C (beta for the first pass).
    auto passes = [&](i64 k0, i64 k1, float beta, float* C, i64 ld) {
      for (i64 k = k0; k < k1; k += gg::gemm_depth_block) {
        const i64 kc = std::min(gg::gemm_depth_block, k1 - k);
        gg::gemm(true, false, c.M, c.N, kc, 0.75f, A.data() + k * lda, lda, B.data() + k * ldb, ldb, k == k0 ? beta : 1.f,
                 C, ld);
      }
    };
    for (float beta : {0.f, 0.5f}) {
      std::vector<float> want = C0, second(std::size_t(c.M * c.N));
      passes(0, K0, beta, want.data(), ldc);
      passes(K0, c.K, 0.f, second.data(), c.N);
      for (i64 i = 0; i < c.M; ++i)
        for (i64 j = 0; j < c.N; ++j) want[std::size_t(i * ldc + j)] += second[std::size_t(i * c.N + j)];
      const std::uint64_t before = gg::gemm_split_depth_calls();
      int mismatched_calls = 0;
      for (int rep = 0; rep < 9; ++rep) {
        gg::set_num_threads(1 + rep % 3);
        gg::set_thread_shares({});
        if (rep == 4) gg::set_thread_shares({1, 3});
        if (rep == 5) gg::set_thread_shares({3, 1, 1});
        std::vector<float> C = C0;
        gg::gemm(true, false, c.M, c.N, c.K, 0.75f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        if (C != want) ++mismatched_calls;
      }
      gg::set_thread_shares({});
      CHECK(mismatched_calls == 0);
      CHECK(gg::gemm_split_depth_calls() == before + 9);  // split on 1 thread too
    }
    with_threads([&] { check({true, false, c.M, c.N, c.K, 0.75f, 0.5f, c.pad}); });  // the values are the product's
  }
  gg::set_num_threads(saved);
}

TEST_CASE("gemm's rows_done sees every row of C once, final, on every path") {
  // (ta, tb, M, N, K): tiny (plain loops), direct, blocked with stolen row blocks, blocked
  // over three depth slices (a row block is final after its last one), a column split (more
  // column tiles than row tiles), a weight gradient summed in two halves, and no depth.
  const Case cases[] = {{false, false, 5, 7, 3, 1.f, 0.f},       {false, true, 40, 48, 64, 1.f, 0.f},
                        {false, true, 768, 512, 128, 1.f, 0.f},  {false, false, 400, 64, 600, 1.f, 0.f},
                        {false, false, 24, 2048, 128, 1.f, 0.f}, {true, false, 128, 512, 768, 1.f, 0.f},
                        {false, false, 30, 20, 0, 1.f, 0.f}};
  const int saved = gg::num_threads();
  for (int threads : {1, 2}) {
    gg::set_num_threads(threads);
    for (const Case& c : cases) {
      CAPTURE(threads);
      CAPTURE(c.M);
      CAPTURE(c.N);
      CAPTURE(c.K);
      const i64 lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
      std::mt19937 rng(3);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      std::vector<float> A(std::size_t(std::max<i64>(1, c.M * c.K))), B(std::size_t(std::max<i64>(1, c.K * c.N)));
      for (float& v : A) v = u(rng);
      for (float& v : B) v = u(rng);
      std::vector<float> want(std::size_t(c.M * c.N)), C(std::size_t(c.M * c.N), -7.f);
      gg::gemm(c.ta, c.tb, c.M, c.N, c.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, want.data(), c.N);
      std::mutex mu;
      std::vector<int> seen(std::size_t(c.M), 0);
      int not_final = 0, bad_range = 0;
      const gg::GemmRowsDone rows_done = [&](i64 r0, i64 r1) {
        std::lock_guard<std::mutex> lk(mu);
        if (r0 < 0 || r1 > c.M || r0 >= r1) ++bad_range;
        for (i64 r = std::max<i64>(r0, 0); r < std::min(r1, c.M); ++r) {
          ++seen[std::size_t(r)];
          for (i64 j = 0; j < c.N; ++j) not_final += C[std::size_t(r * c.N + j)] != want[std::size_t(r * c.N + j)];
        }
      };
      gg::gemm(c.ta, c.tb, c.M, c.N, c.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), c.N, &rows_done);
      CHECK(bad_range == 0);
      CHECK(not_final == 0);
      CHECK(std::count(seen.begin(), seen.end(), 1) == c.M);
      CHECK(C == want);
    }
  }
  gg::set_num_threads(saved);
}
