// Tests for ops/cpu/simd.h: every generic lambda the kernels use (exp, log, sqrt, tanh, erf,
// max, neg, add/sub/mul/div) run by simd::map / zip / zip_scalar_* (batch body plus scalar
// tail) against the same lambda called on floats one at a time; and simd::sum, max_of,
// dot and axpy against plain loops, on sizes 1, 3, 7, 15, 17, 33 and 1000.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/simd.h"

namespace simd = gg::simd;

namespace {

const std::size_t kSizes[] = {1, 3, 7, 15, 17, 33, 1000};
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_values(std::size_t n, float lo, float hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Distance between two floats in units in the last place of `want` (0: identical).
double ulps(float got, float want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0.0 : 1e30;
  if (got == want) return 0.0;
  if (std::isinf(got) || std::isinf(want)) return 1e30;
  const float tiny = std::numeric_limits<float>::min();
  if (std::abs(got) < tiny && std::abs(want) < tiny) return 0.0;  // subnormal: flushing is fine
  const float spacing = std::nextafter(std::abs(want), kInf) - std::abs(want);
  return std::abs(double(got) - double(want)) / double(spacing);
}

// The lambdas exactly as the kernels in elementwise.cpp / reduce.cpp write them.
const auto f_exp = [](auto x) { return simd::exp(x); };
const auto f_log = [](auto x) { return simd::log(x); };
const auto f_sqrt = [](auto x) { return simd::sqrt(x); };
const auto f_tanh = [](auto x) { return simd::tanh(x); };
const auto f_erf = [](auto x) { return simd::erf(x); };
const auto f_neg = [](auto x) { return x * -1.f; };
const auto f_add = [](auto x, auto y) { return x + y; };
const auto f_sub = [](auto x, auto y) { return x - y; };
const auto f_mul = [](auto x, auto y) { return x * y; };
const auto f_div = [](auto x, auto y) { return x / y; };
const auto f_max = [](auto x, auto y) { return simd::max(x, y); };

// simd::map(f) over n values vs f on each float; returns the worst ulp distance.
template <class F>
double map_vs_scalar(F f, const std::vector<float>& a) {
  std::vector<float> out(a.size() + 1, 12345.f);  // one guard element past the end
  simd::map(a.size(), out.data(), a.data(), f);
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, ulps(out[i], f(a[i])));
  if (out[a.size()] != 12345.f) worst = 1e30;  // wrote past n
  return worst;
}

// simd::zip and both zip_scalar_* variants vs f on floats.
template <class F>
double zip_vs_scalar(F f, const std::vector<float>& a, const std::vector<float>& b) {
  const std::size_t n = a.size();
  std::vector<float> out(n + 1, 12345.f), left(n + 1, 12345.f), right(n + 1, 12345.f);
  simd::zip(n, out.data(), a.data(), b.data(), f);
  simd::zip_scalar_right(n, right.data(), a.data(), b[0], f);
  simd::zip_scalar_left(n, left.data(), a[0], b.data(), f);
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    worst = std::max(worst, ulps(out[i], f(a[i], b[i])));
    worst = std::max(worst, ulps(right[i], f(a[i], b[0])));
    worst = std::max(worst, ulps(left[i], f(a[0], b[i])));
  }
  if (out[n] != 12345.f || left[n] != 12345.f || right[n] != 12345.f) worst = 1e30;
  return worst;
}

}  // namespace

TEST_CASE("simd::map: the batch body agrees with the scalar path") {
  std::uint32_t seed = 1;
  for (std::size_t n : kSizes) {
    INFO("n = " << n << ", width = " << simd::width);
    // xsimd's exp/log/tanh/erf are a few ulps from libm's.
    CHECK(map_vs_scalar(f_exp, random_values(n, -80.f, 80.f, seed++)) <= 4);
    CHECK(map_vs_scalar(f_exp, random_values(n, -1.f, 1.f, seed++)) <= 4);
    CHECK(map_vs_scalar(f_log, random_values(n, 1e-6f, 1e6f, seed++)) <= 4);
    CHECK(map_vs_scalar(f_log, random_values(n, 0.5f, 2.f, seed++)) <= 4);
    CHECK(map_vs_scalar(f_tanh, random_values(n, -10.f, 10.f, seed++)) <= 4);
    CHECK(map_vs_scalar(f_tanh, random_values(n, -0.1f, 0.1f, seed++)) <= 4);
    CHECK(map_vs_scalar(f_erf, random_values(n, -5.f, 5.f, seed++)) <= 4);
    CHECK(map_vs_scalar(f_erf, random_values(n, -0.1f, 0.1f, seed++)) <= 4);
    // IEEE operations are exact in both paths.
    CHECK(map_vs_scalar(f_sqrt, random_values(n, 0.f, 1e4f, seed++)) == 0);
    CHECK(map_vs_scalar(f_neg, random_values(n, -1e3f, 1e3f, seed++)) == 0);
  }
}

TEST_CASE("simd::erf: within 6e-8 of erf and 2.1 ulp, the same bits in the body and the tail") {
  // Every float step of 1/4096 over [-4.5, 4.5] (the table's intervals and past the end),
  // the floats next to the intervals' ends of either table (the narrow one's 0.5, 1.5, 2.5,
  // where a + 0.5 rounds up into the next interval just below them; the wide one's k/4) and
  // 2,000 tiny magnitudes down to 1e-30 (the first interval's relative accuracy).
  std::vector<float> a;
  for (int k = -18432; k <= 18432; ++k) a.push_back(float(k) / 4096.f);
  std::vector<float> ends{3.9192059f};
  for (int k = 1; k < 16; ++k) ends.push_back(float(k) / 4.f);  // 0.25 ... 3.75, 0.5, 1.5 and 2.5 among them
  for (float end : ends) {
    float lo = end, hi = end;
    for (int k = 0; k < 8; ++k) {
      lo = std::nextafter(lo, 0.f);
      hi = std::nextafter(hi, kInf);
      a.insert(a.end(), {lo, hi, -lo, -hi});
    }
  }
  for (int k = 0; k < 2000; ++k) {
    const float tiny = float(std::pow(10.0, -30.0 + 29.5 * k / 1999.0));
    a.push_back(tiny);
    a.push_back(-tiny);
  }
  std::vector<float> body(a.size());
  const std::size_t whole = a.size() / simd::width * simd::width;
  simd::map(whole, body.data(), a.data(), f_erf);
  double worst_abs = 0, worst_ulps = 0;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float scalar = simd::erf(a[i]);  // the one-value path, as a kernel's tail runs it
    if (i < whole && std::memcmp(&body[i], &scalar, sizeof scalar) != 0) ++differ;
    const double want = std::erf(double(a[i]));
    worst_abs = std::max(worst_abs, std::abs(double(scalar) - want));
    const float want_f = float(want);
    worst_ulps = std::max(worst_ulps, want_f == 0.f ? 0.0 : std::abs(double(scalar) - want) /
                                           double(std::nextafter(std::abs(want_f), kInf) - std::abs(want_f)));
    CHECK_MESSAGE(std::abs(scalar) <= 1.f, "x = " << a[i]);
    CHECK_MESSAGE(simd::erf(-a[i]) == -scalar, "odd at x = " << a[i]);  // exactly odd
  }
  CHECK(worst_abs <= 6e-8);
  CHECK(worst_ulps <= 2.1);
#if defined(GG_SCALAR) || defined(__FMA__)
  CHECK(differ == 0);  // one fused multiply-add per step in both paths
#endif
  // Past the table: exactly 1; signed zeros keep their sign; NaN stays NaN.
  for (float x : {4.f, 4.5f, 10.f, 1e30f, kInf}) {
    CHECK(simd::erf(x) == 1.f);
    CHECK(simd::erf(-x) == -1.f);
  }
  CHECK(simd::erf(3.95f) == 1.f);  // erf(3.95) rounds to 1 in float
  CHECK(std::signbit(simd::erf(-0.f)));
  CHECK(simd::erf(0.f) == 0.f);
  CHECK(std::isnan(simd::erf(std::numeric_limits<float>::quiet_NaN())));
  std::vector<float> nans(simd::width, std::numeric_limits<float>::quiet_NaN()), out(simd::width);
  simd::map(nans.size(), out.data(), nans.data(), f_erf);
  for (float y : out) CHECK(std::isnan(y));
}

TEST_CASE("simd::map on special values keeps the scalar path's answers") {
  // 33 values: two full 16-wide registers (or more narrower ones) and a tail, with each
  // special value present in both.
  const float specials[] = {0.f, -0.f, kInf, -kInf, 1e-40f, -1e-40f, 88.f, 89.f, -88.f, -104.f, 1.f};
  std::vector<float> a;
  for (int rep = 0; rep < 3; ++rep)
    for (float s : specials) a.push_back(s);
  for (float& x : a)
    if (&x - a.data() >= 22) x = -x;  // the tail copy mirrored
  CHECK(map_vs_scalar(f_exp, a) <= 4);
  CHECK(map_vs_scalar(f_tanh, a) <= 4);
  CHECK(map_vs_scalar(f_erf, a) <= 4);
  CHECK(map_vs_scalar(f_neg, a) == 0);
  // neg flips the sign of zero in the body as in the tail.
  std::vector<float> zeros(33, 0.f), out(33);
  simd::map(33, out.data(), zeros.data(), f_neg);
  for (float z : out) CHECK(std::signbit(z));
  std::vector<float> pos;
  for (float x : a) pos.push_back(std::abs(x));
  CHECK(map_vs_scalar(f_log, pos) <= 4);   // log(0) = -inf, log(inf) = inf
  CHECK(map_vs_scalar(f_sqrt, pos) == 0);
}

TEST_CASE("simd::zip and zip_scalar_*: the batch body agrees with the scalar path") {
  std::uint32_t seed = 100;
  for (std::size_t n : kSizes) {
    INFO("n = " << n);
    auto a = random_values(n, -100.f, 100.f, seed++);
    auto b = random_values(n, -100.f, 100.f, seed++);
    for (std::size_t i = 0; i < n; i += 5) b[i] = a[i];  // ties for max
    CHECK(zip_vs_scalar(f_add, a, b) == 0);
    CHECK(zip_vs_scalar(f_sub, a, b) == 0);
    CHECK(zip_vs_scalar(f_mul, a, b) == 0);
    CHECK(zip_vs_scalar(f_div, a, b) == 0);
    CHECK(zip_vs_scalar(f_max, a, b) == 0);
    // max with infinities (the masked-softmax case).
    for (std::size_t i = 0; i < n; i += 3) a[i] = -kInf;
    CHECK(zip_vs_scalar(f_max, a, b) == 0);
    CHECK(zip_vs_scalar(f_add, a, b) == 0);
  }
}

TEST_CASE("simd::sum, max_of, dot and axpy against plain loops") {
  std::uint32_t seed = 200;
  for (std::size_t n : kSizes) {
    INFO("n = " << n);
    auto a = random_values(n, -1.f, 1.f, seed++);
    auto b = random_values(n, -1.f, 1.f, seed++);
    double s = 0, sa = 0, d = 0, da = 0;
    for (std::size_t i = 0; i < n; ++i) {
      s += a[i];
      sa += std::abs(a[i]);
      d += double(a[i]) * b[i];
      da += std::abs(double(a[i]) * b[i]);
    }
    // Summation order differs from the plain loop: error bounded by ~n eps sum|x|.
    const double eps = std::numeric_limits<float>::epsilon();
    CHECK(std::abs(double(simd::sum(n, a.data())) - s) <= double(n) * eps * sa + 1e-30);
    CHECK(std::abs(double(simd::dot(n, a.data(), b.data())) - d) <= double(n) * eps * da + 1e-30);

    // max_of is exact; put the maximum first, in the body and last (the tail).
    for (std::size_t where : {std::size_t(0), n / 2, n - 1}) {
      auto m = a;
      m[where] = 2.f;
      CHECK(simd::max_of(n, m.data()) == 2.f);
      for (auto& x : m) x = -kInf;
      m[where] = -3.f;
      CHECK(simd::max_of(n, m.data()) == -3.f);
    }
    std::vector<float> all_inf(n, -kInf);
    CHECK(simd::max_of(n, all_inf.data()) == -kInf);
    float plain_max = a[0];
    for (float x : a) plain_max = std::max(plain_max, x);
    CHECK(simd::max_of(n, a.data()) == plain_max);

    // axpy: y += alpha x, one rounding (fma) or two: within an ulp or so of the double result.
    std::vector<float> y = b;
    y.push_back(777.f);  // guard
    const float alpha = -0.75f;
    simd::axpy(n, alpha, a.data(), y.data());
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double want = double(b[i]) + double(alpha) * a[i];
      worst = std::max(worst, std::abs(double(y[i]) - want) / (eps * (std::abs(b[i]) + std::abs(alpha * a[i]))));
    }
    CHECK(worst <= 1.0);
    CHECK(y[n] == 777.f);
  }
}

TEST_CASE("simd::sum of many values keeps its accuracy") {
  // 1e5 copies of 0.1f: a single float accumulator drifts by ~1e-3 relative.
  std::vector<float> a(100000, 0.1f);
  const double want = 100000.0 * double(0.1f);
  CHECK(std::abs(double(simd::sum(a.size(), a.data())) - want) / want < 2e-4);
  CHECK(simd::sum(0, a.data()) == 0.f);
  CHECK(simd::dot(0, a.data(), a.data()) == 0.f);
}

TEST_CASE("simd::sum_prefix: the bits of sum over a row whose tail is zeros, reading only the prefix") {
  // A masked softmax row (ops/passes/masked.h's row limits): values up to len, zeros after it.
  // Every len a multiple of the width and n itself, over lengths that end inside and past
  // sum's four-register loop, with NaN past len to show it is never read.
  std::uint32_t seed = 300;
  const std::size_t w = simd::width;
  for (std::size_t n : {w, 3 * w, 4 * w, 5 * w, 8 * w, 11 * w, 16 * w, 16 * w + 5, std::size_t(37), std::size_t(64), std::size_t(256)}) {
    std::vector<std::size_t> lens;
    for (std::size_t len = w; len < n; len += w) lens.push_back(len);
    lens.push_back(n);
    for (std::size_t len : lens) {
      INFO("n = " << n << ", len = " << len);
      auto a = random_values(n, -1.f, 1.f, seed++);
      for (std::size_t i = len; i < n; ++i) a[i] = 0.f;
      const float want = simd::sum(n, a.data());
      for (std::size_t i = len; i < n; ++i) a[i] = std::numeric_limits<float>::quiet_NaN();
      const float got = simd::sum_prefix(n, len, a.data());
      CHECK(std::memcmp(&got, &want, sizeof got) == 0);
    }
  }
}
