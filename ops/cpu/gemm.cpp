// GEMM: a packed, register-blocked SGEMM in the BLIS/GotoBLAS style. Panels of op(A) and
// op(B) are packed into contiguous per-thread buffers (transposes are absorbed here), and
// an MR x NR microkernel keeps its tile of C in SIMD registers. Threads split C into
// independent row or column stripes, or a weight gradient's sum into two halves (see
// gemm_halves). Small products skip packing (see DIRECT, SMALL).
// Not a general BLAS: row-major float only.
#include "ops/cpu/gemm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>

#if (defined(__AVX512F__) || defined(__AVX2__)) && !defined(GG_SCALAR)
#include <immintrin.h>
#endif

#include "ops/runtime/config.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/transpose.h"

namespace gg {

void gemm_reference(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                    float alpha, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + i] : A[i * lda + k];
        double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      float& c = C[i * ldc + j];
      c = float(alpha * acc + (beta == 0.f ? 0.0 : double(beta) * c));
    }
}

namespace {

using i64 = std::int64_t;

// ---- the register vector the microkernel is written in ----------------------------------
#ifndef GG_SCALAR
using vec = simd::vf;
constexpr int W = int(simd::width);
inline vec vload(const float* p) { return simd::load(p); }
inline void vstore(float* p, const vec& v) { simd::store(p, v); }
inline vec vsplat(float x) { return simd::splat(x); }
#else
using vec = float;  // the scalar build: the same kernel, one float per "register"
constexpr int W = 1;
inline vec vload(const float* p) { return *p; }
inline void vstore(float* p, vec v) { *p = v; }
inline vec vsplat(float x) { return x; }
#endif
inline vec vfma(const vec& a, const vec& b, const vec& c) { return simd::fma(a, b, c); }

#if defined(__AVX512F__) && !defined(GG_SCALAR)
#define GG_PACK_TRANSPOSE 1
constexpr int TW = 16;  // the transpose block: TW x TW values, a register a row
// dst[k * stride + i] = src[i * ld + k] for i < rows (<= TW), k in [0, TW): TW columns of
// `rows` rows, transposed. Stores write exactly `rows` floats per k (masked).
inline void transpose_rows(const float* src, std::int64_t ld, int rows, float* dst, std::int64_t stride,
                           int /*whole: AVX-512's masked stores are fast*/ = 0) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_ps(src + i * ld) : _mm512_setzero_ps();
  transpose16(r);
  const __mmask16 m = __mmask16((1u << rows) - 1u);
  for (int k = 0; k < 16; ++k) _mm512_mask_storeu_ps(dst + k * stride, m, r[k]);
}
#elif defined(__AVX2__) && !defined(GG_SCALAR)
#define GG_PACK_TRANSPOSE 1
constexpr int TW = 8;
// Transposes an 8 x 8 block held as 8 rows in registers: 32-bit and 64-bit interleaves
// within 128-bit lanes, then one round of lane swaps.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 2; ++q) {
    u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0xee);
    u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}
// The first n lanes (n <= 8).
inline __m256i lanes(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
// As the AVX-512 transpose_rows, but AVX2's masked stores are slower than whole ones:
// with rows < 8, k-rows below `whole` are stored whole, their lanes past `rows` written as
// zeros. The caller passes how many k-rows land that on padding or on values that a later
// store of the same pack overwrites.
inline void transpose_rows(const float* src, std::int64_t ld, int rows, float* dst, std::int64_t stride,
                           int whole = 8) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = i < rows ? _mm256_loadu_ps(src + i * ld) : _mm256_setzero_ps();
  transpose8(r);
  if (rows == 8) whole = 8;
  for (int k = 0; k < whole; ++k) _mm256_storeu_ps(dst + k * stride, r[k]);
  if (whole < 8) {
    const __m256i m = lanes(rows);
    for (int k = whole; k < 8; ++k) _mm256_maskstore_ps(dst + k * stride, m, r[k]);
  }
}
#endif

// ---- blocking parameters ------------------------------------------------------------------
// The microkernel tile is MR rows x NV vectors (NR = NV * W columns) of accumulators:
// AVX-512 has 32 registers (MR * NV accumulators + NV for B), AVX2/SSE have 16.
#if defined(GG_SCALAR)
constexpr int MR = 4, NV = 4;
#else
constexpr int MR = (W >= 16) ? 12 : 6, NV = 2;
#endif
constexpr int NR = NV * W;
constexpr i64 KC = gemm_depth_block;  // depth of a packed panel: a B sliver (KC x NR) is 32 KB
constexpr i64 MC = 48 / MR * MR;      // rows of the packed A block (MC x KC), near L1 (measured)
constexpr i64 NC = 1024;              // columns of the packed B panel (KC x NC): 1 MB, in L2
constexpr i64 SMALL = 16 * 16 * 16;   // M*N*K at or below this: plain loops, no microkernel
constexpr i64 DIRECT = 128 * 128 * 128;  // M*N*K at or below this: microkernel, no packing
// M*K at or below this with a transposed A: no packing. Only with AVX-512's 12-row slivers
// (48 bytes of a row of A a step) on AMD's cores, where it was measured faster on the small
// model's weight gradients. AVX2's 6-row ones read half a cache line a step and come back
// for the other half in another call: there packing measured faster. On Intel's cores with
// AVX-512 packing was faster too, on those products hot and cold and on the small model's step.
i64 direct_ta_limit() {
#if defined(__x86_64__) || defined(__i386__)
  static const i64 limit = MR >= 12 && __builtin_cpu_is("amd") ? i64(1) << 19 : 0;
  return limit;
#else
  return 0;
#endif
}
bool steal_rows() { return env_config().steal; }  // GG_STEAL
constexpr double PARALLEL_FLOPS = 3e6;  // below this a second thread costs more than it saves
constexpr i64 TA_PREFETCH_ROWS = 8;     // how far ahead pack_a asks for a transposed A's rows

// ---- per-thread packing buffers (grown on demand, never freed per call) ------------------
struct free_deleter {
  void operator()(float* p) const { std::free(p); }
};
struct Buffer {
  std::unique_ptr<float, free_deleter> p;
  std::size_t cap = 0;
  float* get(std::size_t n) {
    if (n > cap) {
      std::size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      float* q = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!q) throw std::bad_alloc();
      p.reset(q);
      cap = n;
    }
    return p.get();
  }
};
thread_local Buffer pack_a_buf, pack_b_buf;

// Everything a stripe of work needs to know about the call.
using Problem = GemmProblem;

// Whether the packed products read a row-major A (M, K) where it is instead of packing it:
// the microkernel broadcasts a(i, k) from MR rows lda apart (kernels_a_rows, as gemm_direct
// does) rather than from a packed sliver. Packing such an A is a transpose of each block
// (transpose_rows: a visible share of the small model's one-thread step), and the block is
// read from L1 either way. On AMD's cores with AVX-512, reading in place measured faster on
// the small model's non-transposed products (hot, one and two threads) and on both models'
// steps; the masked attention products did not change. In place, the next block's prefetch
// (Ahead) is left out: with it the products and the small step measured slower.
// Not measured on Intel's cores or with AVX2's 6-row tiles: they pack, as before.
bool a_in_place(const Problem& P) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool amd = MR >= 12 && __builtin_cpu_is("amd");
  return amd && !P.ta;
#else
  (void)P;
  return false;
#endif
}

// ---- packing ------------------------------------------------------------------------------
// Packs op(A)[i0 : i0+mc, p0 : p0+kc] as slivers of MR rows: sliver s holds
// Ap[s*MR*kc + k*MR + i] = op(A)(i0 + s*MR + i, p0 + k). A short last sliver keeps stride MR
// (its missing rows are never read: the kernel is instantiated for the exact row count).
void pack_a(const Problem& P, i64 i0, i64 mc, i64 p0, i64 kc, float* Ap) {
  if (P.ta) {  // A is (K, M): rows of A are columns of op(A), contiguous in i
    // One row of A at a time, all the block's slivers from it: its mc values are read
    // once, whole lines. Sliver by sliver instead, each row was read again for every
    // sliver, and rows a multiple of 2 KB apart (M = 512, 1536) fall in two sets of L1, so
    // every read came from L2 (measured: such a product ran well short of the FMA peak
    // that the same product's other layouts reach).
    // Rows of A are a row of x each, KBs apart: one a page, where the hardware prefetchers
    // do not look ahead, so row k + TA_PREFETCH_ROWS is asked for while row k is packed
    // (measured faster on the small model's x^T @ dy when its operands start out of cache).
    for (i64 k = 0; k < kc; ++k) {
      const float* src = P.A + (p0 + k) * P.lda + i0;
      if (k + TA_PREFETCH_ROWS < kc)
        for (i64 c = 0; c < mc; c += 16) __builtin_prefetch(src + TA_PREFETCH_ROWS * P.lda + c, 0, 3);
      for (i64 s = 0; s < mc; s += MR) {
        const i64 mr = std::min<i64>(MR, mc - s);
        float* dst = Ap + s * kc + k * MR;
#if defined(GG_PACK_TRANSPOSE) && defined(__AVX512F__)
        const __mmask16 m = __mmask16((1u << mr) - 1u);  // mr <= MR = 12 floats a row
        _mm512_mask_storeu_ps(dst, m, _mm512_maskz_loadu_ps(m, src + s));
#elif defined(GG_PACK_TRANSPOSE)
        // mr <= MR = 6 floats a row, read masked (past them may lie past A). A whole store
        // spills onto row k + 1 of the same sliver, which is written later: all but the last.
        const __m256i m = lanes(int(mr));
        if (k + 1 < kc)
          _mm256_storeu_ps(dst, _mm256_maskload_ps(src + s, m));
        else
          _mm256_maskstore_ps(dst, m, _mm256_maskload_ps(src + s, m));
#else
        for (i64 i = 0; i < mr; ++i) dst[i] = src[s + i];
#endif
      }
    }
    return;
  }
  // A is (M, K): read each row contiguously, write with stride MR
  for (i64 s = 0; s < mc; s += MR) {  // one MR-row sliver at a time
    const i64 mr = std::min<i64>(MR, mc - s);
    float* dst = Ap + s * kc;
    i64 k0 = 0;
#ifdef GG_PACK_TRANSPOSE
    // TW columns at a time, transposed in registers. A whole store of k-row k spills into
    // k + 1's first values (or the sliver's missing rows), which k + 1 then writes: all
    // but the block's last k-row may be stored whole.
    for (; k0 + TW <= kc; k0 += TW)
      transpose_rows(P.A + (i0 + s) * P.lda + p0 + k0, P.lda, int(mr), dst + k0 * MR, MR, TW - 1);
#endif
    for (i64 i = 0; i < mr; ++i) {
      const float* src = P.A + (i0 + s + i) * P.lda + p0;
      for (i64 k = k0; k < kc; ++k) dst[k * MR + i] = src[k];
    }
  }
}

// Packs op(B)[p0 : p0+kc, j0 : j0+nc] as slivers of NR columns: sliver s holds
// Bp[s*NR*kc + k*NR + j] = op(B)(p0 + k, j0 + s*NR + j), zero-padded to NR columns.
void pack_b(const Problem& P, i64 j0, i64 nc, i64 p0, i64 kc, float* Bp) {
  for (i64 s = 0; s < nc; s += NR) {  // one NR-column sliver at a time
    const i64 nr = std::min<i64>(NR, nc - s);
    float* dst = Bp + s * kc;
    if (P.tb) {  // B is (N, K): read each row (a column of op(B)) contiguously
      i64 k0 = 0;
#ifdef GG_PACK_TRANSPOSE
      for (; k0 + TW <= kc; k0 += TW)  // TW columns at a time, in blocks of TW rows
        for (i64 j = 0; j < nr; j += TW)
          transpose_rows(P.B + (j0 + s + j) * P.ldb + p0 + k0, P.ldb, int(std::min<i64>(TW, nr - j)),
                         dst + k0 * NR + j, NR, TW);  // lanes past nr: padding, zeroed below
#endif
      for (i64 j = 0; j < nr; ++j) {
        const float* src = P.B + (j0 + s + j) * P.ldb + p0;
        for (i64 k = k0; k < kc; ++k) dst[k * NR + j] = src[k];
      }
      for (i64 k = 0; k < kc && nr < NR; ++k)
        for (i64 j = nr; j < NR; ++j) dst[k * NR + j] = 0.f;
    } else {  // B is (K, N): each k is a contiguous run of nr floats
      for (i64 k = 0; k < kc; ++k) {
        const float* src = P.B + (p0 + k) * P.ldb + j0 + s;
        float* d = dst + k * NR;
        if (nr == NR) {
          for (int v = 0; v < NV; ++v) vstore(d + v * W, vload(src + v * W));
        } else {
          for (i64 j = 0; j < nr; ++j) d[j] = src[j];
          for (i64 j = nr; j < NR; ++j) d[j] = 0.f;
        }
      }
    }
  }
}

// ---- the microkernel ----------------------------------------------------------------------
// C[0:ROWS, 0:n] = alpha * a @ b + beta * C over kc steps, n <= NR valid columns, where
//   b(k, 0:NR) = B[k * b_ks + (0:NR)]                     (a packed sliver: b_ks = NR)
//   a(i, k)    = A[i * a_step + k]      when A_ROWS       (A read in place, row-major)
//   a(i, k)    = A[i + k * a_step]      otherwise         (a packed sliver: a_step = MR)
// The ROWS x NR accumulator tile lives in registers for all of kc. beta == 0 never reads C.
template <int ROWS, bool A_ROWS>
void micro_kernel(i64 kc, const float* __restrict A, i64 a_step, const float* __restrict B,
                  i64 b_ks, float* C, i64 ldc, i64 n, float alpha, float beta) {
  // The tile's rows of C are written (and with beta read) only after the kc steps: ask for
  // their cache lines now, so that a miss (C is usually cold: a product's output is new)
  // overlaps the sum instead of stalling the stores after it. The first and last value of
  // each row: NR floats span two lines when the row is not 64-byte aligned.
  for (int i = 0; i < ROWS; ++i) {
    __builtin_prefetch(C + i * ldc, 1, 3);
    __builtin_prefetch(C + i * ldc + n - 1, 1, 3);
  }
  vec acc[ROWS][NV];
  for (int i = 0; i < ROWS; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = vsplat(0.f);

  for (i64 k = 0; k < kc; ++k) {  // rank-1 update: one row of b times one column of a
    vec b[NV];
    for (int v = 0; v < NV; ++v) b[v] = vload(B + v * W);
    for (int i = 0; i < ROWS; ++i) {
      const vec a = vsplat(A_ROWS ? A[i * a_step] : A[i]);
      for (int v = 0; v < NV; ++v) acc[i][v] = vfma(a, b[v], acc[i][v]);
    }
    A += A_ROWS ? 1 : a_step;
    B += b_ks;
  }

  const vec va = vsplat(alpha), vb = vsplat(beta);
  if (n == NR) {  // epilogue: scale and write back the tile, the accumulators in registers
    if (beta == 0.f) {
#pragma GCC unroll 16
      for (int i = 0; i < ROWS; ++i)
        for (int v = 0; v < NV; ++v) vstore(C + i * ldc + v * W, acc[i][v] * va);
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < ROWS; ++i)
        for (int v = 0; v < NV; ++v) {
          float* c = C + i * ldc + v * W;
          vstore(c, vfma(vb, vload(c), acc[i][v] * va));
        }
    }
    return;
  }
  alignas(64) float t[ROWS][NR];  // right edge: spill the tile and copy the valid columns
#pragma GCC unroll 16
  for (int i = 0; i < ROWS; ++i)
    for (int v = 0; v < NV; ++v) vstore(t[i] + v * W, acc[i][v]);
  for (int i = 0; i < ROWS; ++i) {
    float* c = C + i * ldc;
    for (i64 j = 0; j < n; ++j) {  // as the full row: alpha * acc, then fma(beta, c, .)
      const float r = alpha * t[i][j];
      c[j] = beta != 0.f ? std::fma(beta, c[j], r) : r;
    }
  }
}

using kernel_fn = void (*)(i64, const float*, i64, const float*, i64, float*, i64, i64, float,
                           float);

template <bool A_ROWS, int... R>
constexpr auto make_kernels(std::integer_sequence<int, R...>) {
  return std::array<kernel_fn, sizeof...(R)>{&micro_kernel<R + 1, A_ROWS>...};
}
// kernels[r - 1] handles a tile of r rows, so the bottom edge wastes no work.
constexpr auto kernels = make_kernels<false>(std::make_integer_sequence<int, MR>{});
constexpr auto kernels_a_rows = make_kernels<true>(std::make_integer_sequence<int, MR>{});

// ---- the blocked loops over one stripe of C -----------------------------------------------
// The cache lines of the next A block pack_a will read, asked for a few at a time while the
// current block's tiles run, so that the next pack finds them in cache instead of waiting on
// memory between two blocks of compute. The block is `rows` runs of `len` floats, `ld` apart;
// each run's lines go from the one holding its first value to the one holding its last (when
// runs start at different offsets in their lines, as many as the worst offset needs).
// Addresses as integers: the last line asked for may lie past the operand, which a prefetch
// may touch but a pointer may not point to.
class Ahead {
 public:
  Ahead() = default;
  // None when A is read in place (a_in_place): no pack_a will read the block, and asking
  // for its lines measured slower there.
  static Ahead of(const Problem& P, i64 ic, i64 mc, i64 pc, i64 kc) {
    if (mc <= 0 || a_in_place(P)) return {};
    if (P.ta) return Ahead(P.A + pc * P.lda + ic, kc, mc, P.lda);  // A is (K, M)
    return Ahead(P.A + ic * P.lda + pc, mc, kc, P.lda);            // A is (M, K)
  }
  i64 lines() const { return left_; }
  // Asks for the next n lines (fewer when fewer are left).
  void fetch(i64 n) {
    for (n = std::min(n, left_); n > 0; --n, --left_) {
      __builtin_prefetch(reinterpret_cast<const void*>(line_), 0, 2);
      line_ += 64;
      if (++l_ == per_run_) {  // the next run, ld floats on (its offset in a line may differ)
        l_ = 0;
        run_ += step_;
        line_ = run_ / 64 * 64;
      }
    }
  }

 private:
  Ahead(const float* p, i64 rows, i64 len, i64 ld)
      : run_(reinterpret_cast<std::uintptr_t>(p)),
        line_(run_ / 64 * 64),
        step_(std::uintptr_t(ld) * sizeof(float)),
        per_run_(((ld % 16 ? 63 : i64(run_ % 64)) + len * i64(sizeof(float)) + 63) / 64),
        left_(rows * per_run_) {}
  std::uintptr_t run_ = 0, line_ = 0, step_ = 0;
  i64 per_run_ = 0, left_ = 0, l_ = 0;
};

// The tiles of one A block (mc rows from ic) against a packed B panel Bp (nc columns from
// jc), kc deep: C[ic : ic+mc, jc : jc+nc] = alpha * op(A) @ Bp + beta * C. The block is
// packed (Ap, slivers of MR rows) or, with Ap null, read where it is (a_in_place).
void block_tiles(const Problem& P, const float* Ap, const float* Bp, i64 ic, i64 mc, i64 jc, i64 nc, i64 pc, i64 kc,
                 float beta, Ahead next = {}) {
  const i64 tiles = (nc + NR - 1) / NR * ((mc + MR - 1) / MR);
  const i64 per_tile = next.lines() / std::max<i64>(tiles, 1) + 1;  // the next block's lines, spread over the tiles
  for (i64 jr = 0; jr < nc; jr += NR) {  // one B sliver (kc, NR), reused from L1
    const i64 nr = std::min<i64>(NR, nc - jr);
    for (i64 ir = 0; ir < mc; ir += MR) {  // one A sliver: an MR x NR tile of C
      const i64 mr = std::min<i64>(MR, mc - ir);
      next.fetch(per_tile);
      float* const c = P.C + (ic + ir) * P.ldc + jc + jr;
      if (Ap)
        kernels[mr - 1](kc, Ap + ir * kc, MR, Bp + jr * kc, NR, c, P.ldc, nr, P.alpha, beta);
      else  // in place, A is (M, K): a(i, k) = A[(ic + ir + i) * lda + pc + k]
        kernels_a_rows[mr - 1](kc, P.A + (ic + ir) * P.lda + pc, P.lda, Bp + jr * kc, NR, c, P.ldc, nr, P.alpha, beta);
    }
  }
}

// C[i0:i1, j0:j1] = alpha * op(A)[i0:i1, :] @ op(B)[:, j0:j1] + beta * C[i0:i1, j0:j1].
void gemm_blocked(const Problem& P, i64 i0, i64 i1, i64 j0, i64 j1) {
  const i64 kc_max = std::min(P.K, KC);
  float* Bp = pack_b_buf.get(std::size_t(kc_max * ((std::min(j1 - j0, NC) + NR - 1) / NR * NR)));
  // null when A is read in place
  float* Ap = a_in_place(P) ? nullptr : pack_a_buf.get(std::size_t(kc_max * ((std::min(i1 - i0, MC) + MR - 1) / MR * MR)));

  for (i64 jc = j0; jc < j1; jc += NC) {  // NC columns of C: one packed B panel at a time
    const i64 nc = std::min(NC, j1 - jc);
    for (i64 pc = 0; pc < P.K; pc += KC) {  // KC-deep slice of the sum: a rank-KC update
      const i64 kc = std::min(KC, P.K - pc);
      const float beta = pc == 0 ? P.beta : 1.f;  // later slices accumulate onto C
      pack_b(P, jc, nc, pc, kc, Bp);            // Bp: (nc/NR) slivers of (kc, NR)
      for (i64 ic = i0; ic < i1; ic += MC) {  // MC rows of C: one packed A block (mc, kc)
        const i64 mc = std::min(MC, i1 - ic);
        if (Ap) pack_a(P, ic, mc, pc, kc, Ap);  // Ap: (mc/MR) slivers of (kc, MR)
        // the next block: further down, or the top of the next depth slice
        const Ahead next = ic + MC < i1 ? Ahead::of(P, ic + MC, std::min(MC, i1 - ic - MC), pc, kc)
                           : pc + KC < P.K ? Ahead::of(P, i0, std::min(MC, i1 - i0), pc + KC, std::min(KC, P.K - pc - KC))
                                           : Ahead{};
        block_tiles(P, Ap, Bp, ic, mc, jc, nc, pc, kc, beta, next);
      }
    }
  }
}

// ---- row blocks shared out with stealing ----------------------------------------------------
// A product split into row stripes, one a thread, waits at its end for the slowest thread,
// and on a VM one vCPU is often slower than the other or stops for a while (a measurable
// part of the small GPT's step went to such waits). So the rows go out in blocks of MC (fewer
// for a short product):
// each thread starts on a contiguous share of the blocks of every (jc, pc) panel, from its
// front, and when its share is done takes blocks from the back of another's. A block of
// a later depth slice waits until the same block's previous slice is done (C accumulates
// slice after slice), whoever ran it. Each value of C is computed the same way by
// whichever thread, so the bits do not change.
std::atomic<std::uint64_t> stolen_blocks{0};

void gemm_stealing(const Problem& P, int threads, const GemmRowsDone* rows_done) {
  using u64 = std::uint64_t;
  // Blocks of MC rows, or fewer (whole MR slivers) when that would leave a thread fewer
  // than about four: a (128, 128) weight gradient's three blocks of 48 shared 2 to 1.
  const i64 MB = std::clamp((P.M + 4 * threads - 1) / (4 * threads) + MR - 1, i64(MR), MC) / MR * MR;
  const i64 blocks = (P.M + MB - 1) / MB;
  const i64 col_panels = (P.N + NC - 1) / NC, depth_panels = (P.K + KC - 1) / KC;
  const i64 panels = col_panels * depth_panels;
  const int T = int(std::min<i64>(threads, blocks));
  // range[p * T + t]: thread t's blocks of panel p still to claim, [front, back) packed
  // as front | back << 32; progress[k]: the panels block k is done with.
  std::unique_ptr<std::atomic<u64>[]> range(new std::atomic<u64>[std::size_t(panels * T)]);
  std::unique_ptr<std::atomic<i64>[]> progress(new std::atomic<i64>[std::size_t(blocks)]);
  for (i64 p = 0; p < panels; ++p)
    for (int t = 0; t < T; ++t) {
      const u64 lo = u64(blocks * t / T), hi = u64(blocks * (t + 1) / T);
      range[std::size_t(p * T + t)].store(lo | hi << 32, std::memory_order_relaxed);
    }
  for (i64 k = 0; k < blocks; ++k) progress[std::size_t(k)].store(0, std::memory_order_relaxed);
  auto claim = [&](std::atomic<u64>& r, bool front, i64& block) {
    u64 cur = r.load(std::memory_order_relaxed);
    for (;;) {
      const u64 lo = cur & 0xffffffffu, hi = cur >> 32;
      if (lo >= hi) return false;
      const u64 next = front ? (lo + 1) | hi << 32 : lo | (hi - 1) << 32;
      if (r.compare_exchange_weak(cur, next, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        block = i64(front ? lo : hi - 1);
        return true;
      }
    }
  };
  auto work = [&](int t) {
    float* Bp = pack_b_buf.get(std::size_t(std::min(P.K, KC) * ((std::min(P.N, NC) + NR - 1) / NR * NR)));
    float* Ap = a_in_place(P) ? nullptr : pack_a_buf.get(std::size_t(std::min(P.K, KC) * MC));  // null: in place
    for (i64 p = 0; p < panels; ++p) {
      const i64 jc = p / depth_panels * NC, pc = p % depth_panels * KC;
      const i64 nc = std::min(NC, P.N - jc), kc = std::min(KC, P.K - pc);
      const float beta = pc == 0 ? P.beta : 1.f;  // later slices accumulate onto C
      bool packed = false;
      for (;;) {
        i64 k = -1;
        if (!claim(range[std::size_t(p * T + t)], true, k)) {
          for (int v = 1; v < T && k < 0; ++v)
            if (!claim(range[std::size_t(p * T + (t + v) % T)], false, k)) k = -1;
          if (k >= 0) stolen_blocks.fetch_add(1, std::memory_order_relaxed);
        }
        if (k < 0) break;  // every block of this panel is claimed
        if (!packed) {
          pack_b(P, jc, nc, pc, kc, Bp);
          packed = true;
        }
        std::atomic<i64>& done = progress[std::size_t(k)];
        while (done.load(std::memory_order_acquire) < p) cpu_relax();
        const i64 ic = k * MB, mc = std::min(MB, P.M - ic);
        if (Ap) pack_a(P, ic, mc, pc, kc, Ap);
        // likely next: the block after this one, whose rows this thread packs next unless
        // its share is done (then it steals, or moves to the next panel)
        const Ahead next = ic + MB < P.M ? Ahead::of(P, ic + MB, std::min(MB, P.M - ic - MB), pc, kc) : Ahead{};
        block_tiles(P, Ap, Bp, ic, mc, jc, nc, pc, kc, beta, next);
        done.store(p + 1, std::memory_order_release);
        if (rows_done && p + 1 == panels) (*rows_done)(ic, ic + mc);  // the block's rows are final
      }
    }
  };
  parallel_for(T, 1, [&](i64 b, i64 e) {
    for (i64 t = b; t < e; ++t) work(int(t));  // one a thread; all of them when run serially
  });
}

// Small products: nothing is packed when it can be read in place. A is read in either
// layout; B is read in place when it is (K, N) and the sliver is a full NR wide, otherwise
// that one sliver is packed. C[i0:i1, j0:j1] as in gemm_blocked.
void gemm_direct(const Problem& P, i64 i0, i64 i1, i64 j0, i64 j1) {
  float* Bp = pack_b_buf.get(std::size_t(std::min(P.K, KC) * NR));
  for (i64 pc = 0; pc < P.K; pc += KC) {  // KC-deep slice of the sum: a rank-KC update
    const i64 kc = std::min(KC, P.K - pc);
    const float beta = pc == 0 ? P.beta : 1.f;
    for (i64 jr = j0; jr < j1; jr += NR) {  // one B sliver (kc, NR)
      const i64 nr = std::min<i64>(NR, j1 - jr);
      const float* Bs = P.B + pc * P.ldb + jr;  // B(pc + k, jr + j) at Bs[k * ldb + j]
      i64 b_ks = P.ldb;
      if (P.tb || nr < NR) {
        pack_b(P, jr, nr, pc, kc, Bp);
        Bs = Bp;
        b_ks = NR;
      }
      for (i64 ir = i0; ir < i1; ir += MR) {  // an MR x NR tile of C
        const i64 mr = std::min<i64>(MR, i1 - ir);
        float* c = P.C + ir * P.ldc + jr;
        if (P.ta)  // A is (K, M): a(i, k) = A[(pc + k) * lda + ir + i]
          kernels[mr - 1](kc, P.A + pc * P.lda + ir, P.lda, Bs, b_ks, c, P.ldc, nr, P.alpha, beta);
        else  // A is (M, K): a(i, k) = A[(ir + i) * lda + pc + k]
          kernels_a_rows[mr - 1](kc, P.A + ir * P.lda + pc, P.lda, Bs, b_ks, c, P.ldc, nr, P.alpha,
                                 beta);
      }
    }
  }
}

// Tiny products: packing would cost more than it saves. Plain loops over a row of C,
// accumulated in a local chunk of up to 64 columns.
void gemm_small(const Problem& P) {
  for (i64 i = 0; i < P.M; ++i) {  // one row of C: c = alpha * op(A)[i, :] @ op(B) + beta * c
    float* c = P.C + i * P.ldc;
    for (i64 j0 = 0; j0 < P.N; j0 += 64) {  // a chunk of columns that fits on the stack
      const i64 nj = std::min<i64>(64, P.N - j0);
      for (i64 pc = 0; pc < P.K; pc += KC) {  // KC-deep passes, as the microkernel's
        float acc[64] = {};
        // The microkernel's operations, written out: one fused multiply-add a term, then
        // alpha * acc (+ beta * c, fused), so a product gives the same bits on either path
        // (a masked product's row blocks take this one) whether or not the compiler would
        // have contracted a * b + c by itself (GCC does at -O2, not at -O1).
        for (i64 k = pc; k < std::min(P.K, pc + KC); ++k) {  // acc += op(A)(i, k) * op(B)(k, j0 : j0+nj)
          const float a = P.ta ? P.A[k * P.lda + i] : P.A[i * P.lda + k];
          if (P.tb)
            for (i64 j = 0; j < nj; ++j) acc[j] = std::fma(a, P.B[(j0 + j) * P.ldb + k], acc[j]);
          else
            for (i64 j = 0; j < nj; ++j) acc[j] = std::fma(a, P.B[k * P.ldb + j0 + j], acc[j]);
        }
        const float beta = pc == 0 ? P.beta : 1.f;
        for (i64 j = 0; j < nj; ++j) {
          const float r = P.alpha * acc[j];
          c[j0 + j] = beta != 0.f ? std::fma(beta, c[j0 + j], r) : r;
        }
      }
    }
  }
}

// C[i0:i1, j0:j1] of a problem, on one thread: gemm_direct or gemm_blocked.
using stripe_fn = void (*)(const Problem&, i64, i64, i64, i64);

// Products up to DIRECT read A (and usually B) in place; larger ones pack panels, which
// pays for itself once each packed element is reused enough. A transposed A of up to
// direct_ta_limit() values is read in place at any size where that was measured faster
// (AMD with AVX-512): its k-major rows are already the packed layout, and re-reading it
// from L2 costs less than copying it there.
stripe_fn stripe_for(const Problem& P) {
  return P.M * P.N * P.K <= DIRECT || (P.ta && P.M * P.K <= direct_ta_limit()) ? gemm_direct : gemm_blocked;
}

// ---- a weight gradient's sum in two halves -------------------------------------------------
// A weight gradient x^T @ dy is a short, wide sum over many rows (the small GPT's: (128, 512)
// over 768 rows). Split by rows or columns of C, each thread packs and reads every row of x and
// dy, half of them from the other core's cache (the op before split those rows between the
// cores), and packs panels the other thread packs too. Summed in two halves of the rows
// instead, C = (beta C + alpha * terms [0, K0)) + alpha * terms [K0, K), each thread takes a
// half: the rows it likely wrote, packed once. Which products and where K0 falls depend on
// the shape alone (gemm_depth_split), so the bits do not depend on the threads.
constexpr i64 HALVES_MAX_RESULT = i64(1) << 20;  // values of C, and of the second half's buffer
bool split_depth_on() { return env_config().split_depth; }  // GG_SPLIT_DEPTH
thread_local Buffer half_buf;
std::atomic<std::uint64_t> split_depth_calls{0};

void gemm_halves(const Problem& P, i64 K0, const GemmRowsDone* rows_done) {
  split_depth_calls.fetch_add(1, std::memory_order_relaxed);
  float* second = half_buf.get(std::size_t(P.M * P.N));  // alpha * terms [K0, K): (M, N)
  Problem H[2] = {P, P};
  H[0].K = K0;
  H[1].K = P.K - K0;
  H[1].A = P.A + K0 * P.lda;  // A is (K, M)
  H[1].B = P.B + K0 * P.ldb;  // B is (K, N)
  H[1].beta = 0.f, H[1].C = second, H[1].ldc = P.N;
  // Work goes out as (half, 12-row sliver) pairs, half by half: with two threads of equal
  // speed, one half each.
  const i64 rows = (P.M + MR - 1) / MR;
  parallel_for(2 * rows, 1, [&](i64 b, i64 e) {
    while (b < e) {  // the part of [b, e) in one half: its rows [i0, i1)
      const i64 h = b / rows, last = std::min(e, (h + 1) * rows);
      const i64 i0 = (b - h * rows) * MR, i1 = std::min(P.M, (last - h * rows) * MR);
      stripe_for(H[h])(H[h], i0, i1, 0, P.N);
      b = last;
    }
  });
  parallel_for(P.M, 8, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) {
      float* c = P.C + i * P.ldc;
      const float* t = second + i * P.N;
      for (i64 j = 0; j < P.N; ++j) c[j] += t[j];
    }
    if (rows_done) (*rows_done)(i0, i1);
  });
}

}  // namespace

std::uint64_t gemm_stolen_blocks() { return stolen_blocks.load(std::memory_order_relaxed); }
std::uint64_t gemm_split_depth_calls() { return split_depth_calls.load(std::memory_order_relaxed); }

std::int64_t gemm_depth_split(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K) {
  if (!ta || tb || K < 2 * KC || M <= 0 || N <= 0 || M * N > HALVES_MAX_RESULT || M * N * K <= DIRECT ||
      !split_depth_on())
    return 0;
  return K / 2;
}

void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta,
          float* C, std::int64_t ldc, const GemmRowsDone* rows_done) {
  if (M <= 0 || N <= 0) {
    if (rows_done && M > 0) (*rows_done)(0, M);
    return;
  }
  const Problem P{ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  auto all_done = [&] {
    if (rows_done) (*rows_done)(0, M);
  };
  if (K <= 0 || alpha == 0.f) {  // no product: C = beta * C
    for (i64 i = 0; i < M; ++i)
      for (i64 j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return all_done();
  }
  if (M * N * K <= SMALL) {
    gemm_small(P);
    return all_done();
  }
  if (const i64 K0 = gemm_depth_split(ta, tb, M, N, K)) return gemm_halves(P, K0, rows_done);
  const stripe_fn stripe = stripe_for(P);

  // Threads take independent stripes of C: rows in MR units, or columns in NR units when
  // there are more column tiles than row tiles. Each thread packs its own panels.
  const double flops = 2.0 * double(M) * double(N) * double(K);
  const i64 row_tiles = (M + MR - 1) / MR, col_tiles = (N + NR - 1) / NR;
  if (flops < PARALLEL_FLOPS || std::max(row_tiles, col_tiles) < 2) {
    stripe(P, 0, M, 0, N);
    return all_done();
  }
  if (row_tiles >= col_tiles && stripe == gemm_blocked && steal_rows()) return gemm_stealing(P, num_threads(), rows_done);
  struct Job {
    const Problem* p;
    stripe_fn stripe;
    const GemmRowsDone* rows_done;
  } job{&P, stripe, rows_done};
  if (row_tiles >= col_tiles) {
    parallel_for(row_tiles, 1, [job](i64 t0, i64 t1) {
      const i64 i0 = t0 * MR, i1 = std::min(job.p->M, t1 * MR);
      job.stripe(*job.p, i0, i1, 0, job.p->N);
      if (job.rows_done) (*job.rows_done)(i0, i1);
    });
  } else {
    parallel_for(col_tiles, 1, [job](i64 t0, i64 t1) {
      job.stripe(*job.p, 0, job.p->M, t0 * NR, std::min(job.p->N, t1 * NR));
    });
    all_done();  // a row is final only once every column stripe is
  }
}

}  // namespace gg
