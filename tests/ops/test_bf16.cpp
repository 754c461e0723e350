// bf16 at the leaves (ops/cpu/bf16.h): the rounding, and the product with bf16 operands and
// f32 sums on both paths: against a double reference of the rounded operands within the
// bound of f32 sums, and the native path (where the CPU has AVX512_BF16) against the
// emulated one bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <cmath>
#include <functional>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/bf16.h"

using namespace gg;

namespace {
std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace

TEST_CASE("bf16: rounding to nearest even, infinities and NaN kept") {
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(-2.0f) == 0xc000);
  CHECK(to_bf16(from_bits(0x3f808000)) == 0x3f80);  // a tie: to the even 0x3f80
  CHECK(to_bf16(from_bits(0x3f818000)) == 0x3f82);  // a tie: to the even 0x3f82
  CHECK(to_bf16(from_bits(0x3f808001)) == 0x3f81);  // above the tie: up
  CHECK(to_bf16(from_bits(0x3f807fff)) == 0x3f80);  // below it: down
  CHECK(to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds past the largest bf16
  CHECK(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(from_bf16(to_bf16(from_bits(0x7f800001)))));  // a NaN whose payload would round to infinity
  // 8 significant bits: a rounding is off by at most half an ulp, 2^-8 of the value.
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 10.f);
  for (int i = 0; i < 10000; ++i) {
    const float x = d(rng);
    CHECK(std::fabs(round_bf16(x) - x) <= std::ldexp(std::fabs(x), -8));
  }
}

namespace {
struct Case {
  bool ta, tb;
  std::int64_t M, N, K;
  float alpha, beta;
};

// Row-major operands for op(A) (M, K) and op(B) (K, N), a C to add to.
struct Operands {
  std::vector<float> A, B, C;
  std::int64_t lda, ldb, ldc;
};
Operands make(const Case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  Operands o;
  o.lda = (c.ta ? c.M : c.K) + 3;
  o.ldb = (c.tb ? c.K : c.N) + 1;
  o.ldc = c.N + 2;
  o.A.resize(std::size_t((c.ta ? c.K : c.M) * o.lda));
  o.B.resize(std::size_t((c.tb ? c.N : c.K) * o.ldb));
  o.C.resize(std::size_t(c.M * o.ldc));
  for (float& x : o.A) x = d(rng);
  for (float& x : o.B) x = d(rng);
  for (float& x : o.C) x = d(rng);
  return o;
}
// How many results of the native path differ in their bits from the emulated path's.
std::int64_t native_emulated_differ(const Case& c, const Operands& o) {
  std::vector<float> native = o.C, emulated = o.C;
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, native.data(), o.ldc,
            Bf16Path::native);
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, emulated.data(), o.ldc,
            Bf16Path::emulated);
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < native.size(); ++i) differ += bits(native[i]) != bits(emulated[i]);
  return differ;
}

const std::vector<Case> cases = {
    {false, false, 1, 1, 1, 1.f, 0.f},     {false, false, 8, 32, 64, 1.f, 0.f},  {false, true, 13, 45, 77, 0.5f, 1.f},
    {true, false, 9, 17, 33, 1.f, 0.25f},  {true, true, 30, 70, 129, -1.f, 0.f}, {false, false, 64, 64, 256, 1.f, 1.f},
    {false, true, 3, 100, 2, 2.f, 0.f},    {true, false, 100, 3, 300, 1.f, 0.f}};
}  // namespace

TEST_CASE("bf16 product: the emulated path against a double reference of the rounded operands") {
  for (const Case& c : cases) {
    Operands o = make(c, 7);
    std::vector<float> C = o.C;
    gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, C.data(), o.ldc,
              Bf16Path::emulated);
    double worst = 0;
    for (std::int64_t m = 0; m < c.M; ++m)
      for (std::int64_t n = 0; n < c.N; ++n) {
        double sum = 0, mag = 0;
        for (std::int64_t k = 0; k < c.K; ++k) {
          const double a = round_bf16(c.ta ? o.A[std::size_t(k * o.lda + m)] : o.A[std::size_t(m * o.lda + k)]);
          const double b = round_bf16(c.tb ? o.B[std::size_t(n * o.ldb + k)] : o.B[std::size_t(k * o.ldb + n)]);
          sum += a * b;
          mag += std::fabs(a * b);
        }
        const double want = c.alpha * sum + c.beta * o.C[std::size_t(m * o.ldc + n)];
        // K sums of f32 each off by half an ulp of the running sum (<= mag), then alpha and beta.
        const double bound = (double(c.K) + 3) * 0x1p-24 * (std::fabs(c.alpha) * mag + std::fabs(want)) + 1e-30;
        worst = std::max(worst, std::fabs(C[std::size_t(m * o.ldc + n)] - want) / bound);
      }
    INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << c.ta << " tb " << c.tb);
    CHECK(worst <= 1.0);
  }
}

TEST_CASE("bf16 product: the native path (AVX512_BF16) gives the emulated path's bits") {
  if (!cpu_has_avx512_bf16()) {
    MESSAGE("this CPU has no AVX512_BF16: only the emulated path runs here");
    return;
  }
  for (const Case& c : cases)
    for (std::uint32_t seed : {1u, 2u}) {
      INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << c.ta << " tb " << c.tb << " seed " << seed);
      CHECK(native_emulated_differ(c, make(c, seed)) == 0);
    }
}

TEST_CASE("bf16 product: native and emulated agree where products and sums are denormal") {
  if (!cpu_has_avx512_bf16()) return;
  // Operands of 1e-19 and 1e-21 make products of 1e-38 to 1e-42, below the smallest normal
  // f32 (1.2e-38): the instruction reads and writes those as zero, and so must the emulation.
  for (float scale : {1e-19f, 1e-20f, 1e-21f, 1e-37f})
    for (const Case& c : cases) {
      Operands o = make(c, 11);
      for (float& x : o.A) x *= scale;
      for (float& x : o.B) x *= (scale < 1e-30f ? 1.f : scale);
      INFO("scale " << scale << " M " << c.M << " N " << c.N << " K " << c.K);
      CHECK(native_emulated_differ(c, o) == 0);
    }
}

namespace {
// The product as the header specifies it, one value at a time: each operand rounded by
// to_bf16 (a denormal read as zero first), pairs summed in increasing order,
// the odd member first, each a fused multiply-add flushed to zero below FLT_MIN.
float spec_value(const Case& c, const Operands& o, std::int64_t m, std::int64_t n) {
  auto rd = [](float x) {
    if ((bits(x) & 0x7f800000u) == 0) x = std::copysign(0.f, x);  // a denormal reads as zero
    return from_bf16(to_bf16(x));
  };
  auto ftz = [](float x) { return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.f, x) : x; };
  auto a = [&](std::int64_t k) {
    return k < c.K ? rd(c.ta ? o.A[std::size_t(k * o.lda + m)] : o.A[std::size_t(m * o.lda + k)]) : 0.f;
  };
  auto b = [&](std::int64_t k) {
    return k < c.K ? rd(c.tb ? o.B[std::size_t(n * o.ldb + k)] : o.B[std::size_t(k * o.ldb + n)]) : 0.f;
  };
  float acc = 0.f;
  for (std::int64_t p = 0; 2 * p < c.K; ++p) {
    acc = ftz(std::fma(a(2 * p + 1), b(2 * p + 1), acc));
    acc = ftz(std::fma(a(2 * p), b(2 * p), acc));
  }
  const float v = c.alpha * acc;
  return c.beta == 0.f ? v : v + c.beta * o.C[std::size_t(m * o.ldc + n)];
}
}  // namespace

TEST_CASE("bf16 product: both paths give the specified bits, rounding ties, denormals, infinities and NaN") {
  // Shapes past the vector widths and the blocks (16-wide rounding, 12-row tiles, 48-row
  // blocks, 32-column tiles), odd depths, every transpose, and the parallel size.
  const std::vector<Case> big = {{false, false, 61, 47, 35, 1.f, 0.f},   {false, true, 50, 33, 64, 1.f, 0.f},
                                 {true, false, 49, 70, 31, 0.5f, 1.f},  {true, true, 97, 18, 17, 1.f, 0.f},
                                 {false, true, 130, 100, 129, 1.f, 0.f}, {true, false, 100, 140, 257, 1.f, 0.f}};
  const float specials[] = {from_bits(0x3f808000), from_bits(0x3f818000), from_bits(0x3f807fff), from_bits(0x007fffff),
                            from_bits(0x00000001), from_bits(0x80400000), from_bits(0x00800000), 1e-30f, -3e38f,
                            std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (const Case& c : big) {
    Operands o = make(c, 5);
    std::mt19937 rng(9);
    for (std::size_t i = 0; i < o.A.size(); i += 1 + rng() % 37) o.A[i] = specials[rng() % std::size(specials)];
    for (std::size_t i = 0; i < o.B.size(); i += 1 + rng() % 41) o.B[i] = specials[rng() % std::size(specials)];
    for (Bf16Path path : {Bf16Path::emulated, Bf16Path::native}) {
      if (path == Bf16Path::native && !cpu_has_avx512_bf16()) continue;
      std::vector<float> C = o.C;
      gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, C.data(), o.ldc, path);
      std::int64_t differ = 0;
      for (std::int64_t m = 0; m < c.M; ++m)
        for (std::int64_t n = 0; n < c.N; ++n) {
          const float want = spec_value(c, o, m, n), got = C[std::size_t(m * o.ldc + n)];
          differ += !(bits(want) == bits(got) || (std::isnan(want) && std::isnan(got)));
        }
      INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << c.ta << " tb " << c.tb << " path "
                << (path == Bf16Path::native ? "native" : "emulated"));
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("bf16 product: rows_done reports every row once, after its values are final") {
  const Case c{false, true, 200, 40, 64, 1.f, 0.f};
  Operands o = make(c, 3);
  std::vector<float> C(std::size_t(c.M * o.ldc), 0.f), want = C;
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, want.data(), o.ldc);
  std::vector<int> seen(std::size_t(c.M), 0);
  std::int64_t early = 0;
  const std::function<void(std::int64_t, std::int64_t)> done = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      ++seen[std::size_t(r)];
      for (std::int64_t n = 0; n < c.N; ++n)
        early += bits(C[std::size_t(r * o.ldc + n)]) != bits(want[std::size_t(r * o.ldc + n)]);
    }
  };
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, C.data(), o.ldc, bf16_path(), &done);
  CHECK(early == 0);
  CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
}

TEST_CASE("bf16 product: op(B) packed once gives gemm_bf16's bits on every part of it") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Bf16Path path : {Bf16Path::emulated, Bf16Path::native}) {
        if (path == Bf16Path::native && !cpu_has_avx512_bf16()) continue;
        const Case c{ta, tb, 37, 70, 51, 1.f, 0.f};
        Operands o = make(c, 13);
        const Bf16PackedB packed(tb, c.K, c.N, o.B.data(), o.ldb, path);
        // parts: columns from a multiple of 16, depth in whole pairs (to K when K is odd)
        for (auto [j0, cols, k0, k1] : {std::array<std::int64_t, 4>{0, 70, 0, 51}, {16, 40, 0, 20}, {32, 38, 10, 51},
                                        {48, 5, 50, 51}, {0, 1, 2, 4}}) {
          INFO("ta " << ta << " tb " << tb << " j0 " << j0 << " cols " << cols << " k " << k0 << ".." << k1);
          std::vector<float> got(std::size_t(c.M * cols), -1.f), want(got.size(), -2.f);
          packed.product(ta, c.M, o.A.data(), o.lda, j0, cols, k0, k1, got.data(), cols);
          const float* a = ta ? o.A.data() + k0 * o.lda : o.A.data() + k0;
          const float* b = tb ? o.B.data() + j0 * o.ldb + k0 : o.B.data() + k0 * o.ldb + j0;
          gemm_bf16(ta, tb, c.M, cols, k1 - k0, 1.f, a, o.lda, b, o.ldb, 0.f, want.data(), cols, path);
          std::int64_t differ = 0;
          for (std::size_t i = 0; i < got.size(); ++i) differ += bits(got[i]) != bits(want[i]);
          CHECK(differ == 0);
        }
        std::vector<float> out(std::size_t(c.M * c.N));
        CHECK_THROWS_AS(packed.product(ta, c.M, o.A.data(), o.lda, 8, 10, 0, 4, out.data(), c.N), std::invalid_argument);
        CHECK_THROWS_AS(packed.product(ta, c.M, o.A.data(), o.lda, 0, 10, 1, 4, out.data(), c.N), std::invalid_argument);
        CHECK_THROWS_AS(packed.product(ta, c.M, o.A.data(), o.lda, 0, 10, 0, 3, out.data(), c.N), std::invalid_argument);
      }
}

// ---- bf16 products in a graph (Attrs::bf16, Bf16Products) ----------------------------
#include "ops/ir/build.h"
#include "ops/passes/simplify.h"
#include "ops/runtime/executor.h"

TEST_CASE("bf16 products: built inside the scope, listed, kept apart by simplification, computed as gemm_bf16") {
  Graph g;
  const NodeId a = op::input(g, "a", {5, 40}), b = op::input(g, "b", {40, 7});
  const NodeId f32 = op::matmul(g, a, b);
  NodeId bf = -1, ew = -1;
  {
    Bf16Products on(g);
    bf = op::matmul(g, a, b);
    ew = op::exp(g, a);  // not a product: stays f32 arithmetic, no attribute
    {
      Bf16Products off(g, false);  // a part kept in f32 inside a bf16 scope
      CHECK_FALSE(g.node(op::matmul(g, a, b)).attrs.bf16);
    }
    CHECK(g.bf16_products());
  }
  CHECK_FALSE(g.bf16_products());
  CHECK_FALSE(g.node(f32).attrs.bf16);
  CHECK(g.node(bf).attrs.bf16);
  CHECK_FALSE(g.node(ew).attrs.bf16);
  CHECK(to_text_line(g, bf).find("[bf16]") != std::string::npos);  // the listing shows the precision
  CHECK(to_text_line(g, f32).find("[bf16]") == std::string::npos);
  const Simplified s = simplify(g, {f32, bf});
  CHECK(s.roots[0] != s.roots[1]);  // the same inputs, another value: not merged

  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> va(200), vb(280);
  for (float& x : va) x = d(rng);
  for (float& x : vb) x = d(rng);
  ParamStore ps;
  Executor ex(g, {f32, bf}, ps);
  ex.set_input("a", Tensor::f32({5, 40}, va));
  ex.set_input("b", Tensor::f32({40, 7}, vb));
  ex.run();
  std::vector<float> want(35);
  gemm_bf16(false, false, 5, 7, 40, 1.f, va.data(), 40, vb.data(), 7, 0.f, want.data(), 7);
  std::int64_t same_as_gemm_bf16 = 0, same_as_f32 = 0;
  for (int i = 0; i < 35; ++i) {
    same_as_gemm_bf16 += bits(ex.value(bf).f()[i]) == bits(want[i]);
    same_as_f32 += ex.value(bf).f()[i] == ex.value(f32).f()[i];
  }
  CHECK(same_as_gemm_bf16 == 35);
  CHECK(same_as_f32 < 35);  // the rounding of the operands shows
}
