// The one place that includes xsimd: the batch type, math overloads that serve both
// `float` and the batch, and the loops that run a batch body plus a scalar tail.
// An element-wise kernel is written once as a generic lambda `[](auto x) { ... }`;
// with GG_SCALAR defined the same lambda runs one float at a time (the reference build).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#ifndef GG_SCALAR
#include <xsimd/xsimd.hpp>
#endif

#include "ops/cpu/erf_table.h"

// Which erf table the build takes (see erf below): the wide one with AVX-512's 16 lanes.
#if !defined(GG_SCALAR) && defined(__AVX512F__)
#define GG_ERF_WIDE 1
#else
#define GG_ERF_WIDE 0
#endif

namespace gg::simd {

#ifndef GG_SCALAR
#if defined(__AVX512BW__) && !defined(__OPTIMIZE__)
// An unoptimized build (-O0, CMake's Debug) uses xsimd's AVX-512F kernels where AVX-512BW
// is there: GCC defines the BW blend intrinsics as macros without __OPTIMIZE__, and their
// casts do not take xsimd's batches (xsimd::log's integer select fails to compile). The
// same register width; the integer selects inside log and exp use AVX-512F blends instead.
using vf = xsimd::batch<float, xsimd::avx512f>;  // one register of floats
#else
using vf = xsimd::batch<float>;          // one register of floats
#endif
inline constexpr std::size_t width = vf::size;
inline vf load(const float* p) { return vf::load_unaligned(p); }
inline void store(float* p, const vf& v) { v.store_unaligned(p); }
inline vf splat(float x) { return vf(x); }
inline vf exp(const vf& x) { return xsimd::exp(x); }
inline vf log(const vf& x) { return xsimd::log(x); }
inline vf sqrt(const vf& x) { return xsimd::sqrt(x); }
inline vf tanh(const vf& x) { return xsimd::tanh(x); }
inline vf log1p(const vf& x) { return xsimd::log1p(x); }
inline vf sin(const vf& x) { return xsimd::sin(x); }
inline vf cos(const vf& x) { return xsimd::cos(x); }
inline vf abs(const vf& x) { return xsimd::abs(x); }  // clears the sign bit
// a * b + c rounded once. Debian's xsimd has no AVX-512 fma kernel: its generic one is
// a * b + c, which GCC fuses only where it contracts (-O2 and up), so at -O1 the SIMD erf's
// body and its scalar tail (std::fma) differed in the last bit, and the GEMM and the FMA
// probe ran a multiply and an add. The intrinsic says what is meant at every level.
inline vf fma(const vf& a, const vf& b, const vf& c) {
#if defined(__AVX512F__)
  static_assert(width == 16);
  return vf(_mm512_fmadd_ps(a, b, c));
#else
  return xsimd::fma(a, b, c);
#endif
}
// erf by table (ops/cpu/erf_table.h, made by tools/fit_erf.py): a = |x|, then a polynomial of
// the interval a lies in by Horner with fused multiply-adds, at most 1; exactly 1 from
// erf_one_from (3.92) on, where erf rounds to 1 in float; then x's sign. NaN stays NaN.
// Each ISA takes the table whose lookups it does fastest (measured in a clean loop):
// - AVX-512, the wide table: 16 intervals i = min(floor(4a), 15) of degree 7 in
//   t = a - center[i]; a sixteen-float table is one register, each lookup one cross-lane
//   permute (faster on Intel's AVX-512 cores than the narrow table with its more terms).
// - AVX2 and narrower, the narrow table: 4 intervals i = min(floor(a + 0.5), 3) of degree 9,
//   p = a * P0(a * a) on [0, 0.5) and Pi(a - i) (exact) on the others; each lookup one
//   in-lane permute of a four-float table (faster on AMD's AVX2 cores than the wide
//   table, whose lookups take two cross-lane permutes and a blend there).
// The float version below does the same operations as the build's SIMD one, so a kernel's
// SIMD body and scalar tail give the same bits (where the target has FMA: without it
// xsimd::fma rounds twice). Worst error of either table 5.8e-8 absolute, 2.1 ulp relative
// (tests/ops/test_simd.cpp).
inline vf erf(const vf& x) {
  using namespace detail;
  const vf a = xsimd::abs(x);
#if GG_ERF_WIDE
  static_assert(width == 16 && erf_wide_intervals == 16);  // a table is one register
  const __m512i i = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_mul_ps(a, _mm512_set1_ps(4.f)), _mm512_set1_ps(15.f)));
  auto lookup = [&](const float* table) { return vf(_mm512_permutexvar_ps(i, _mm512_load_ps(table))); };
  const vf t = a - lookup(erf_wide_center);
  vf p = lookup(erf_wide_coef[erf_wide_degree]);
  for (int d = erf_wide_degree - 1; d >= 0; --d) p = fma(p, t, lookup(erf_wide_coef[d]));
#else
  static_assert(erf_narrow_intervals <= 4);  // an in-lane permute picks from four floats
  const auto i = xsimd::to_int(xsimd::min(a + vf(0.5f), vf(float(erf_narrow_intervals - 1))));  // truncated
  const vf fi = xsimd::to_float(i);
#if defined(__AVX2__)
  static_assert(width == 8);
  auto lookup = [&](const float* table) { return vf(_mm256_permutevar_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(table)), i)); };
#else
  auto lookup = [&](const float* table) { return vf::gather(table, i); };
#endif
  const auto first = fi == vf(0.f);
  const vf t = xsimd::select(first, a * a, a - fi);
  vf p = lookup(erf_narrow_coef[erf_narrow_degree]);
  for (int d = erf_narrow_degree - 1; d >= 0; --d) p = fma(p, t, lookup(erf_narrow_coef[d]));
  p = p * xsimd::select(first, a, vf(1.f));  // times 1 is exact: the scalar path's branch
#endif
  p = xsimd::select(p > vf(1.f), vf(1.f), p);
  p = xsimd::select(a >= vf(erf_one_from), vf(1.f), p);
  return xsimd::bitwise_or(p, xsimd::bitwise_and(x, vf(-0.f)));
}
inline vf max(const vf& a, const vf& b) { return xsimd::max(a, b); }
inline float hsum(const vf& v) { return xsimd::hadd(v); }
using mask = vf::batch_bool_type;  // one register of comparison results
// a where m, else b (bit for bit: a selection, no arithmetic).
inline vf select(const mask& m, const vf& a, const vf& b) { return xsimd::select(m, a, b); }
// 1.0 where m, else 0.0.
inline vf one_where(const mask& m) { return xsimd::select(m, vf(1.f), vf(0.f)); }
// a != b as C++ has it: true when either is NaN (xsimd's neq is ordered on AVX-512).
inline mask not_equal(const vf& a, const vf& b) { return !(a == b); }
inline float hmax(const vf& v) {
  alignas(64) float t[width];
  v.store_aligned(t);
  float m = t[0];
  for (std::size_t i = 1; i < width; ++i) m = std::max(m, t[i]);
  return m;
}
#else
inline constexpr std::size_t width = 1;
#endif

inline float exp(float x) { return std::exp(x); }
inline float log(float x) { return std::log(x); }
inline float sqrt(float x) { return std::sqrt(x); }
inline float tanh(float x) { return std::tanh(x); }
inline float log1p(float x) { return std::log1p(x); }
inline float sin(float x) { return std::sin(x); }
inline float cos(float x) { return std::cos(x); }
inline float abs(float x) { return std::fabs(x); }
inline float erf(float x) {  // the SIMD erf's operations, one value at a time
  using namespace detail;
  const float a = std::fabs(x);
  if (!(a < erf_one_from)) return a != a ? x : std::copysign(1.f, x);
#if GG_ERF_WIDE
  const int i = std::min(int(a * 4.f), erf_wide_intervals - 1);
  const float t = a - erf_wide_center[i];
  float p = erf_wide_coef[erf_wide_degree][i];
  for (int d = erf_wide_degree - 1; d >= 0; --d) p = std::fma(p, t, erf_wide_coef[d][i]);
#else
  const int i = std::min(int(a + 0.5f), erf_narrow_intervals - 1);
  const float t = i == 0 ? a * a : a - float(i);
  float p = erf_narrow_coef[erf_narrow_degree][i];
  for (int d = erf_narrow_degree - 1; d >= 0; --d) p = std::fma(p, t, erf_narrow_coef[d][i]);
  if (i == 0) p = p * a;
#endif
  return std::copysign(p > 1.f ? 1.f : p, x);
}
inline float max(float a, float b) { return a > b ? a : b; }  // like _mm_max_ps: NaN in a gives b
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float select(bool m, float a, float b) { return m ? a : b; }
inline float one_where(bool m) { return m ? 1.f : 0.f; }
inline bool not_equal(float a, float b) { return a != b; }

// out[i] = f(a[i]) for i < n. With AVX-512's 32 registers the body takes two registers a
// step: a transcendental f (erf, exp) is a long dependent chain, and two independent ones
// side by side keep the FMA ports busier than the out-of-order window alone does (measured
// faster for erf and exp on Intel's AVX-512 cores, hot; four a step no better; not measured
// with AVX2's 16 registers, where two erf chains and their tables may not fit). The same
// values take the SIMD body, so the same bits.
template <class F>
inline void map(std::size_t n, float* out, const float* a, F f) {
  std::size_t i = 0;
#ifndef GG_SCALAR
  if constexpr (width >= 16)
    for (; i + 2 * width <= n; i += 2 * width) {
      const vf x0 = f(load(a + i)), x1 = f(load(a + i + width));
      store(out + i, x0);
      store(out + i + width, x1);
    }
  for (; i + width <= n; i += width) store(out + i, f(load(a + i)));
#endif
  for (; i < n; ++i) out[i] = f(a[i]);
}

// out[i] = f(a[i], b[i]) for i < n.
template <class F>
inline void zip(std::size_t n, float* out, const float* a, const float* b, F f) {
  std::size_t i = 0;
#ifndef GG_SCALAR
  for (; i + width <= n; i += width) store(out + i, f(load(a + i), load(b + i)));
#endif
  for (; i < n; ++i) out[i] = f(a[i], b[i]);
}

// out[i] = f(a[i], s) for i < n: a vector against one broadcast value.
template <class F>
inline void zip_scalar_right(std::size_t n, float* out, const float* a, float s, F f) {
  std::size_t i = 0;
#ifndef GG_SCALAR
  const vf sv = splat(s);
  for (; i + width <= n; i += width) store(out + i, f(load(a + i), sv));
#endif
  for (; i < n; ++i) out[i] = f(a[i], s);
}

// out[i] = f(s, b[i]) for i < n.
template <class F>
inline void zip_scalar_left(std::size_t n, float* out, float s, const float* b, F f) {
  std::size_t i = 0;
#ifndef GG_SCALAR
  const vf sv = splat(s);
  for (; i + width <= n; i += width) store(out + i, f(sv, load(b + i)));
#endif
  for (; i < n; ++i) out[i] = f(s, b[i]);
}

namespace detail {
template <bool A, bool B, bool C, class F>
inline void zip3_run(std::size_t n, float* out, const float* a, const float* b, const float* c, F f) {
  std::size_t i = 0;
#ifndef GG_SCALAR
  const vf as = splat(*a), bs = splat(*b), cs = splat(*c);
  for (; i + width <= n; i += width)
    store(out + i, f(A ? load(a + i) : as, B ? load(b + i) : bs, C ? load(c + i) : cs));
#endif
  for (; i < n; ++i) out[i] = f(a[A ? i : 0], b[B ? i : 0], c[C ? i : 0]);
}
}  // namespace detail

// out[i] = f(a[i * sa], b[i * sb], c[i * sc]) for i < n, each stride 1 (a vector) or 0
// (one value broadcast along the run): one body per stride pattern, no multiply per element.
template <class F>
inline void zip3(std::size_t n, float* out, const float* a, std::int64_t sa, const float* b, std::int64_t sb,
                 const float* c, std::int64_t sc, F f) {
  if (n == 0) return;
  switch ((sa ? 4 : 0) + (sb ? 2 : 0) + (sc ? 1 : 0)) {
    case 0: return detail::zip3_run<false, false, false>(n, out, a, b, c, f);
    case 1: return detail::zip3_run<false, false, true>(n, out, a, b, c, f);
    case 2: return detail::zip3_run<false, true, false>(n, out, a, b, c, f);
    case 3: return detail::zip3_run<false, true, true>(n, out, a, b, c, f);
    case 4: return detail::zip3_run<true, false, false>(n, out, a, b, c, f);
    case 5: return detail::zip3_run<true, false, true>(n, out, a, b, c, f);
    case 6: return detail::zip3_run<true, true, false>(n, out, a, b, c, f);
    default: return detail::zip3_run<true, true, true>(n, out, a, b, c, f);
  }
}

// Sum of a[0..len) where a[len..n) are zeros, without reading them: each value goes to
// the partial sum that the whole row's sum adds it to, in the same order, and a zero
// changes none of them, so the bits are sum(n, a)'s. len <= n.
inline float sum_prefix(std::size_t n, std::size_t len, const float* a) {
  std::size_t i = 0;
  float acc = 0.f;
#ifndef GG_SCALAR
  // Four registers of partial sums (at least 16 of them even with 4-wide SSE) over whole
  // groups of four registers of the row, then one for the registers after them.
  vf v[4] = {splat(0.f), splat(0.f), splat(0.f), splat(0.f)};
  const std::size_t quads = n / (4 * width) * (4 * width);
  for (; i + 4 * width <= std::min(len, quads); i += 4 * width)
    for (std::size_t j = 0; j < 4; ++j) v[j] += load(a + i + j * width);
  // A quad cut short (len < quads): at most three registers, into v[0], v[1], v[2] as a
  // whole quad's would go. Unrolled, so that v stays in registers: indexed by a run-time
  // (i / width) % 4, the four registers lived on the stack, each add a store and a reload
  // (a causal softmax's masked rows spent a sixth of their time there).
  if (i < quads)
#pragma GCC unroll 3
    for (std::size_t j = 0; j < 3 && i + width <= len; ++j, i += width) v[j] += load(a + i);
  for (; i + width <= len; i += width) v[0] += load(a + i);
  acc = hsum((v[0] + v[1]) + (v[2] + v[3]));
#else
  // Sixteen partial sums, as many as the narrowest SIMD build keeps: as accurate.
  float part[16] = {};
  const std::size_t whole = n / 16 * 16;
  for (; i < std::min(len, whole); ++i) part[i % 16] += a[i];
  for (float p : part) acc += p;
#endif
  for (; i < len; ++i) acc += a[i];
  return acc;
}

// Sum of a[0..n).
inline float sum(std::size_t n, const float* a) { return sum_prefix(n, n, a); }

// Max of a[0..n), n >= 1.
inline float max_of(std::size_t n, const float* a) {
  std::size_t i = 0;
  float m = a[0];
#ifndef GG_SCALAR
  if (n >= width) {
    vf v = load(a);
    for (i = width; i + width <= n; i += width) v = max(v, load(a + i));
    m = hmax(v);
  }
#endif
  for (; i < n; ++i) m = max(m, a[i]);
  return m;
}

// out[i] = f(a[i]) for i < n, as map, and the sum of the out[i] (one register of partial
// sums, then across it) while they are in registers: one pass where map then sum take two.
template <class F>
inline float map_sum(std::size_t n, float* out, const float* a, F f) {
  std::size_t i = 0;
  float acc = 0.f;
#ifndef GG_SCALAR
  vf v = splat(0.f);
  for (; i + width <= n; i += width) {
    const vf x = f(load(a + i));
    store(out + i, x);
    v += x;
  }
  acc = hsum(v);
#endif
  for (; i < n; ++i) acc += out[i] = f(a[i]);
  return acc;
}

// Dot product of a[0..n) and b[0..n).
inline float dot(std::size_t n, const float* a, const float* b) {
  std::size_t i = 0;
  float acc = 0.f;
#ifndef GG_SCALAR
  vf v = splat(0.f);
  for (; i + width <= n; i += width) v = fma(load(a + i), load(b + i), v);
  acc = hsum(v);
#endif
  for (; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// y[i] += alpha * x[i].
inline void axpy(std::size_t n, float alpha, const float* x, float* y) {
  std::size_t i = 0;
#ifndef GG_SCALAR
  const vf av = splat(alpha);
  for (; i + width <= n; i += width) store(y + i, fma(av, load(x + i), load(y + i)));
#endif
  for (; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace gg::simd
