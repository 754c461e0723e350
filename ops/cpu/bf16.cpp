// The bf16 product: both operands packed once as bf16 pairs (op(B) in panels of 16 columns,
// each pair of depth rows one 64-byte vector; op(A) a 32-bit pair per row and pair of
// depth), then tiles of 8 rows x 32 columns, each summed over the whole depth in registers
// (VDPBF16PS on the native path, the same arithmetic lane by lane on the emulated one), then
// one shared epilogue applies alpha and beta, so both paths give the same bits.
#include "ops/cpu/bf16.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/runtime/config.h"

#if defined(__x86_64__) && !defined(GG_SCALAR)
#include <immintrin.h>
#define GG_BF16_X86 1
#endif

namespace gg {
namespace {

constexpr int MR = 8;   // rows of a tile
constexpr int NP = 16;  // columns of a packed panel (one vector of f32 lanes)
constexpr int NR = 32;  // columns of a tile: two panels

// A bf16 whose exponent is zero reads as zero (the instruction's DAZ).
inline std::uint16_t daz(std::uint16_t h) { return (h & 0x7f80u) == 0 ? std::uint16_t(h & 0x8000u) : h; }
inline float ftz(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.f, x) : x; }

struct Packed {
  std::int64_t KP = 0, panels = 0;
  std::vector<std::uint32_t> a;  // M x KP: row m's pair p = bf16(A[m][2p]) | bf16(A[m][2p+1]) << 16
  std::vector<std::uint32_t> b;  // panels x KP x NP pairs, laid out as the instruction reads them
};

// Packs into `p`, whose buffers keep their capacity from one product to the next (a thread's
// own: the attention's many small products would otherwise allocate each time).
void pack(Packed& p, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb) {
  p.KP = (K + 1) / 2;
  p.panels = (N + NP - 1) / NP;
  p.a.resize(std::size_t(M * p.KP));
  p.b.resize(std::size_t(p.panels * p.KP * NP));
  const std::int64_t KP = p.KP;
  auto h = [](float x) -> std::uint32_t { return daz(to_bf16(x)); };
  // Each loop reads its operand along rows (a transposed one too): packing is a pass over
  // memory, and a column-wise read would miss the cache on every element.
  parallel_for((M + 15) / 16, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t blk = b0; blk < b1; ++blk) {
      const std::int64_t m0 = blk * 16, m1 = std::min(M, m0 + 16);
      if (!trans_a) {
        for (std::int64_t m = m0; m < m1; ++m) {
          const float* row = A + m * lda;
          std::uint32_t* out = p.a.data() + m * KP;
          for (std::int64_t q = 0; q < K / 2; ++q) out[q] = h(row[2 * q]) | h(row[2 * q + 1]) << 16;
          if (K % 2) out[KP - 1] = h(row[K - 1]);
        }
      } else {  // op(A)[m][k] = A[k][m]: rows 2q and 2q + 1 of A give pair q of 16 rows of op(A)
        for (std::int64_t q = 0; q < KP; ++q) {
          const float* lo = A + 2 * q * lda;
          const float* hi = 2 * q + 1 < K ? lo + lda : nullptr;
          for (std::int64_t m = m0; m < m1; ++m) p.a[std::size_t(m * KP + q)] = h(lo[m]) | (hi ? h(hi[m]) << 16 : 0u);
        }
      }
    }
  });
  parallel_for(p.panels, 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q) {
      std::uint32_t* panel = p.b.data() + q * KP * NP;
      const std::int64_t n0 = q * NP, cols = std::min<std::int64_t>(NP, N - n0);
      if (cols < NP) std::fill(panel, panel + KP * NP, 0u);  // the columns past N
      if (!trans_b) {
        for (std::int64_t k = 0; k < KP; ++k) {
          const float* lo = B + 2 * k * ldb + n0;
          const float* hi = 2 * k + 1 < K ? lo + ldb : nullptr;
          for (std::int64_t j = 0; j < cols; ++j) panel[k * NP + j] = h(lo[j]) | (hi ? h(hi[j]) << 16 : 0u);
        }
      } else {  // op(B)[k][n] = B[n][k]: row n of B is column n of op(B)
        for (std::int64_t j = 0; j < cols; ++j) {
          const float* row = B + (n0 + j) * ldb;
          for (std::int64_t k = 0; k < K / 2; ++k) panel[k * NP + j] = h(row[2 * k]) | h(row[2 * k + 1]) << 16;
          if (K % 2) panel[(KP - 1) * NP + j] = h(row[K - 1]);
        }
      }
    }
  });
}

// One tile's sums, emulated: lane by lane, the instruction's order and rounding.
void tile_emulated(const Packed& p, const std::uint32_t* const* arow, std::int64_t q0, int panels,
                   float acc[MR][NR]) {
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = 0.f;
  for (int h = 0; h < panels; ++h) {
    const std::uint32_t* bp = p.b.data() + (q0 + h) * p.KP * NP;
    for (int r = 0; r < MR; ++r) {
      float* c = acc[r] + h * NP;
      for (std::int64_t k = 0; k < p.KP; ++k) {
        const std::uint32_t a = arow[r][k];
        const float a_lo = from_bf16(std::uint16_t(a)), a_hi = from_bf16(std::uint16_t(a >> 16));
        const std::uint32_t* b = bp + k * NP;
        // Each product enters its sum unrounded (a fused multiply-add, as the instruction
        // does; written out, so that no compiler setting can round a product that underflows).
        for (int j = 0; j < NP; ++j) {
          const float t = ftz(std::fma(a_hi, from_bf16(std::uint16_t(b[j] >> 16)), c[j]));
          c[j] = ftz(std::fma(a_lo, from_bf16(std::uint16_t(b[j])), t));
        }
      }
    }
  }
}

#ifdef GG_BF16_X86
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void tile_native(
    const Packed& p, const std::uint32_t* const* arow, std::int64_t q0, int panels, float acc[MR][NR]) {
  __m512 c0[MR], c1[MR];
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  const std::uint32_t* b0 = p.b.data() + q0 * p.KP * NP;
  const std::uint32_t* b1 = panels > 1 ? b0 + p.KP * NP : b0;  // one panel: the second is a copy, not stored
  for (std::int64_t k = 0; k < p.KP; ++k) {
    const __m512bh vb0 = (__m512bh)_mm512_loadu_si512(b0 + k * NP);
    const __m512bh vb1 = (__m512bh)_mm512_loadu_si512(b1 + k * NP);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh va = (__m512bh)_mm512_set1_epi32(int(arow[r][k]));
      c0[r] = _mm512_dpbf16_ps(c0[r], va, vb0);
      c1[r] = _mm512_dpbf16_ps(c1[r], va, vb1);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(acc[r], c0[r]);
    _mm512_storeu_ps(acc[r] + NP, c1[r]);
  }
}
#endif

}  // namespace

bool cpu_has_avx512_bf16() {
#ifdef GG_BF16_X86
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

Bf16Path bf16_path() {
  static const Bf16Path p = cpu_has_avx512_bf16() && env_config().bf16_native ? Bf16Path::native : Bf16Path::emulated;
  return p;
}

std::string bf16_path_name(Bf16Path path) {
  if (path == Bf16Path::native) return "AVX512_BF16 (VDPBF16PS)";
  return cpu_has_avx512_bf16() ? "emulated in f32 (GG_BF16_NATIVE=0)"
                               : "emulated in f32 (this CPU has no AVX512_BF16: not faster than f32)";
}

void gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc, Bf16Path path) {
  if (M <= 0 || N <= 0) return;
  if (path == Bf16Path::native && !cpu_has_avx512_bf16()) path = Bf16Path::emulated;
  thread_local Packed packed;
  pack(packed, trans_a, trans_b, M, N, K, A, lda, B, ldb);
  const Packed& p = packed;
  const std::int64_t row_tiles = (M + MR - 1) / MR, col_tiles = (N + NR - 1) / NR;
  parallel_for(row_tiles * col_tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    alignas(64) float acc[MR][NR];
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t m0 = (t / col_tiles) * MR, n0 = (t % col_tiles) * NR;
      const int rows = int(std::min<std::int64_t>(MR, M - m0)), cols = int(std::min<std::int64_t>(NR, N - n0));
      const std::uint32_t* arow[MR];
      for (int r = 0; r < MR; ++r) arow[r] = p.a.data() + (m0 + std::min(r, rows - 1)) * p.KP;  // past M: row again, not stored
      const int panels = cols > NP ? 2 : 1;
#ifdef GG_BF16_X86
      if (path == Bf16Path::native) tile_native(p, arow, n0 / NP, panels, acc);
      else tile_emulated(p, arow, n0 / NP, panels, acc);
#else
      tile_emulated(p, arow, n0 / NP, panels, acc);
#endif
      // The epilogue both paths share.
      for (int r = 0; r < rows; ++r) {
        float* c = C + (m0 + r) * ldc + n0;
        for (int j = 0; j < cols; ++j) {
          const float v = alpha * ftz(acc[r][j]);
          c[j] = beta == 0.f ? v : v + beta * c[j];
        }
      }
    }
  });
}

// ---- the peak ---------------------------------------------------------------------------
namespace {
constexpr int CHAINS = 12;
volatile float sink;

#ifdef GG_BF16_X86
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) float dp_loop(std::int64_t iters, float seed) {
  volatile int va = 0x3f803f80, vb = 0x00010001;  // bf16 pairs (1, 1) and (tiny, tiny): not folded
  const __m512bh a = (__m512bh)_mm512_set1_epi32(va), b = (__m512bh)_mm512_set1_epi32(vb);
  __m512 acc[CHAINS];
  for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_ps(seed + float(c));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < CHAINS; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}
#else
float dp_loop(std::int64_t, float) { return 0; }
#endif

double dp_flops(std::int64_t iters) { return 4.0 * 16 * CHAINS * double(iters); }

double dp_run(int threads, std::int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> out(std::size_t(threads), 0.f);
  if (threads == 1) out[0] = dp_loop(iters, 1.f);
  else
    parallel_for(threads, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = b; t < e; ++t) out[std::size_t(t)] = dp_loop(iters, float(t));
    });
  float s = 0;
  for (float v : out) s += v;
  sink = s;
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return dp_flops(iters) * threads / sec * 1e-9;
}
}  // namespace

Bf16Peak measure_bf16_peak(double seconds, int repeats) {
  Bf16Peak p;
  p.threads = num_threads();
  if (!cpu_has_avx512_bf16()) return p;
  seconds = std::max(seconds, 1e-3);
  repeats = std::max(repeats, 1);
  std::int64_t iters = 1 << 14;
  for (;;) {
    const double took = dp_flops(iters) / (dp_run(1, iters) * 1e9);
    if (took >= seconds / 4 || iters > (std::int64_t(1) << 40)) {
      iters = std::max<std::int64_t>(1, std::int64_t(double(iters) * seconds / took));
      break;
    }
    iters *= 4;
  }
  for (int r = 0; r < repeats; ++r) p.per_core_gflops = std::max(p.per_core_gflops, dp_run(1, iters));
  for (int r = 0; r < repeats; ++r) p.total_gflops = std::max(p.total_gflops, dp_run(p.threads, iters));
  return p;
}

}  // namespace gg
