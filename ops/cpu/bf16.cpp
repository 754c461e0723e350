// The bf16 product: both operands packed once as bf16 pairs (op(B) in panels of 16 columns,
// each pair of depth rows one 64-byte vector; op(A) a 32-bit pair per row and pair of
// depth), then tiles of 8 rows x 32 columns, each summed over the whole depth in registers
// (VDPBF16PS on the native path, the same arithmetic lane by lane on the emulated one), then
// one shared epilogue applies alpha and beta, so both paths give the same bits.
#include "ops/cpu/bf16.h"

#include <algorithm>
#include <bit>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <cfloat>
#include <cmath>
#include <functional>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/probe.h"
#include "ops/cpu/transpose.h"
#include "ops/runtime/config.h"

#if defined(__x86_64__) && !defined(GG_SCALAR)
#include <immintrin.h>
#define GG_BF16_X86 1
#endif

namespace gg {
namespace {

using i64 = std::int64_t;
using u32 = std::uint32_t;

constexpr int MR = 12;  // rows of a tile
constexpr int NP = 16;  // columns of a packed panel (one vector of f32 lanes)
constexpr int NR = 32;  // columns of a tile: two panels
constexpr i64 MB = 48;  // rows of a work block: its A pairs are packed by the thread that runs it
constexpr double PARALLEL_FLOPS = 3e6;  // below this a second thread costs more than it saves

// An f32 whose exponent is zero reads as zero (the instructions' DAZ): operands are rounded
// from it, as VCVTNE2PS2BF16 does, and no bf16 rounded from a normal f32 is denormal.
inline float daz(float x) { return (std::bit_cast<u32>(x) & 0x7f800000u) == 0 ? std::copysign(0.f, x) : x; }
inline float ftz(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.f, x) : x; }
inline u32 bf(float x) { return to_bf16(daz(x)); }

// ---- rounding runs of values to bf16 pairs ------------------------------------------------
// Every operand value goes through pairs_along or pairs_across: with the native path's
// VCVTNE2PS2BF16 (32 values an instruction), or lane by lane with integer arithmetic; both
// give bf()'s bits, as the tests check.
#if defined(__AVX512F__) && !defined(GG_SCALAR)
// (Shifts through the zero-masked forms: GCC 12 warns of an uninitialized operand in the plain ones.)
inline __m512i shr16(__m512i v) { return _mm512_maskz_srli_epi32(0xffff, v, 16); }
// 16 floats -> their bf() bits in the low half of each 32-bit lane.
inline __m512i bf_lanes(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  const __mmask16 zero_exp = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
  u = _mm512_mask_and_epi32(u, zero_exp, u, _mm512_set1_epi32(int(0x80000000u)));
  const __m512i odd = _mm512_and_si512(shr16(u), _mm512_set1_epi32(1));
  __m512i r = shr16(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(r, nan, shr16(u), _mm512_set1_epi32(0x40));
}
#endif

#ifdef GG_BF16_X86
#define GG_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
// The tile kernels are kept out of line: inlined into their caller, the rows' 12 offsets and
// the panels' pointers spilled to the stack inside the loop (measured 20% slower).
#define GG_BF16_TILE GG_BF16_TARGET __attribute__((noinline))
// The first 2 * (n / 32) * 16 pairs of pairs_along, by the instruction; returns how many
// values it rounded.
GG_BF16_TARGET i64 pairs_along_native(const float* src, i64 K, u32* out) {
  i64 k = 0;
  for (; k + 32 <= K; k += 32)
    _mm512_storeu_si512(out + k / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k + 16), _mm512_loadu_ps(src + k)));
  return k;
}
// The first n / 16 * 16 pairs of pairs_across, by the instruction; returns how many.
GG_BF16_TARGET i64 pairs_across_native(const float* lo, const float* hi, i64 n, u32* out) {
  // vpermw: the 16 low values (lo) and 16 high ones (hi) interleaved into pairs
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  i64 i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 h = hi ? _mm512_loadu_ps(hi + i) : _mm512_setzero_ps();
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(h, _mm512_loadu_ps(lo + i));
    _mm512_storeu_si512(out + i, _mm512_permutexvar_epi16(order, both));
  }
  return i;
}
#endif

// out[p] = bf(src[2p]) | bf(src[2p+1]) << 16 for the (K + 1) / 2 pairs of a run of K values
// (odd K: the last pair's high half is 0).
inline void pairs_along(const float* src, i64 K, u32* out, bool native) {
  i64 k = 0;
#ifdef GG_BF16_X86
  if (native) k = pairs_along_native(src, K, out);
#endif
#if defined(__AVX512F__) && !defined(GG_SCALAR)
  auto* o16 = reinterpret_cast<std::uint16_t*>(out);  // pair p's halves are values 2p, 2p + 1
  for (; k + 16 <= K; k += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o16 + k), _mm512_cvtepi32_epi16(bf_lanes(_mm512_loadu_ps(src + k))));
#endif
  (void)native;
  for (; k + 1 < K; k += 2) out[k / 2] = bf(src[k]) | bf(src[k + 1]) << 16;
  if (k < K) out[k / 2] = bf(src[k]);
}

// out[i] = bf(lo[i]) | bf(hi[i]) << 16 for i < n: pairs across two runs (hi null: 0).
inline void pairs_across(const float* lo, const float* hi, i64 n, u32* out, bool native) {
  i64 i = 0;
#ifdef GG_BF16_X86
  if (native) i = pairs_across_native(lo, hi, n, out);
#endif
#if defined(__AVX512F__) && !defined(GG_SCALAR)
  for (; i + 16 <= n; i += 16) {
    const __m512i l = bf_lanes(_mm512_loadu_ps(lo + i));
    const __m512i h = hi ? _mm512_maskz_slli_epi32(0xffff, bf_lanes(_mm512_loadu_ps(hi + i)), 16) : _mm512_setzero_si512();
    _mm512_storeu_si512(out + i, _mm512_or_si512(l, h));
  }
#endif
  (void)native;
  for (; i < n; ++i) out[i] = bf(lo[i]) | (hi ? bf(hi[i]) << 16 : 0u);
}

// ---- packing --------------------------------------------------------------------------------
// op(B) as panels of NP columns: panel q holds pair p of column j at b[(q * KP + p) * NP + j],
// the 64 bytes VDPBF16PS reads for one pair of depth; columns past N are 0.
// op(A) either in rows (A not transposed: row m's pairs at a[m * KP + p], a plain rounding of
// each row) or, transposed, in slivers of MR rows (pair p of row r at a[p * MR + r]: the
// pairs are formed across two rows of A, contiguous in m).
struct Problem : GemmProblem {
  i64 KP, panels;  // pairs of depth, panels of op(B)
  bool native;     // rounding by VCVTNE2PS2BF16 (the same bits)
  i64 b_stride;    // pairs a packed panel holds (KP, or more when the product sums part of them)
  i64 c_col0;      // the packed column that is C's column 0
};

// op(B) not transposed (B is (K, N)): panels [q0, q1). Depth rows 2p and 2p + 1 give pair
// p of every column; each pair of rows is read QB panels (whole cache lines) at a time, and
// each panel is written in order.
constexpr i64 QB = 4;
void pack_b_rows(const Problem& P, i64 q0, i64 q1, u32* b) {
  const i64 KP = P.KP;
  for (i64 qb = q0; qb < q1; qb += QB) {
    const i64 qe = std::min(q1, qb + QB);
    for (i64 p = 0; p < KP; ++p) {
      const float* lo = P.B + 2 * p * P.ldb;
      const float* hi = 2 * p + 1 < P.K ? lo + P.ldb : nullptr;
      for (i64 q = qb; q < qe; ++q) {
        const i64 n0 = q * NP, cols = std::min<i64>(NP, P.N - n0);
        u32* out = b + (q * KP + p) * NP;
        pairs_across(lo + n0, hi ? hi + n0 : nullptr, cols, out, P.native);
        if (cols < NP) std::fill(out + cols, out + NP, 0u);  // the columns past N
      }
    }
  }
}

// op(B) transposed (B is (N, K): row n of B is column n of op(B)): panels [q0, q1), each
// from NP rows rounded into `tmp`, then transposed 16 x 16 pairs at a time.
void pack_b_cols(const Problem& P, i64 q0, i64 q1, u32* b, std::vector<u32>& tmp) {
  const i64 KP = P.KP;
  for (i64 q = q0; q < q1; ++q) {
    u32* panel = b + q * KP * NP;
    const i64 n0 = q * NP, cols = std::min<i64>(NP, P.N - n0);
    tmp.resize(std::size_t(NP * KP));
    std::fill(tmp.begin() + cols * KP, tmp.end(), 0u);  // the columns past N
    for (i64 j = 0; j < cols; ++j) pairs_along(P.B + (n0 + j) * P.ldb, P.K, tmp.data() + j * KP, P.native);
    i64 p = 0;
#if defined(__AVX512F__) && !defined(GG_SCALAR)
    for (; p + 16 <= KP; p += 16) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(tmp.data() + j * KP + p);
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(panel + (p + i) * NP, r[i]);
    }
#endif
    for (; p < KP; ++p)
      for (i64 j = 0; j < NP; ++j) panel[p * NP + j] = tmp[std::size_t(j * KP + p)];
  }
}

// Panels [q0, q1) of op(B), either layout.
void pack_b(const Problem& P, i64 q0, i64 q1, u32* b) {
  thread_local std::vector<u32> tmp;
  if (P.tb) pack_b_cols(P, q0, q1, b, tmp);
  else pack_b_rows(P, q0, q1, b);
}

// The A pairs of rows [m0, m1) into `a`: rows (a[(m - m0) * KP + p]) or, transposed, slivers
// of MR rows (a[s * KP * MR + p * MR + r]; rows past m1 in the last sliver are 0).
void pack_a(const Problem& P, i64 m0, i64 m1, u32* a) {
  const i64 KP = P.KP;
  if (!P.ta) {
    for (i64 m = m0; m < m1; ++m) pairs_along(P.A + m * P.lda, P.K, a + (m - m0) * KP, P.native);
    return;
  }
  const i64 rows = m1 - m0, slivers = (rows + MR - 1) / MR;
  alignas(64) u32 run[MB];
  for (i64 p = 0; p < KP; ++p) {  // A is (K, M): rows 2p and 2p + 1 of A give pair p of every row
    const float* lo = P.A + 2 * p * P.lda + m0;
    pairs_across(lo, 2 * p + 1 < P.K ? lo + P.lda : nullptr, rows, run, P.native);
    for (i64 s = 0; s < slivers; ++s) {
      u32* out = a + s * KP * MR + p * MR;
      const i64 n = std::min<i64>(MR, rows - s * MR);
      std::copy(run + s * MR, run + s * MR + n, out);
      std::fill(out + n, out + MR, 0u);
    }
  }
}

// ---- tiles ------------------------------------------------------------------------------------
// A tile: MR rows of pairs read as a[r * rs + p * ps] (rows: rs = KP, ps = 1; slivers: rs = 1,
// ps = MR), against two panels (one panel: b1 == b0). The sums over the whole depth stay in
// registers, then go to out (MR x NR, ld apart). (Runs of depth that go on from stored sums
// measured slower, even with K = 2048.)
struct TileA {
  const u32* a;
  i64 rs, ps;
};

// One tile's sums, emulated: lane by lane, the instruction's order and rounding.
void tile_emulated(TileA A, const u32* b0, const u32* b1, i64 KP, float* out, i64 ld) {
  for (int h = 0; h < 2; ++h) {
    const u32* bp = h == 0 ? b0 : b1;
    for (int r = 0; r < MR; ++r) {
      float c[NP] = {};
      for (i64 k = 0; k < KP; ++k) {
        const u32 a = A.a[r * A.rs + k * A.ps];
        const float a_lo = from_bf16(std::uint16_t(a)), a_hi = from_bf16(std::uint16_t(a >> 16));
        const u32* b = bp + k * NP;
        // Each product enters its sum unrounded (a fused multiply-add, as the instruction
        // does; written out, so that no compiler setting can round a product that underflows).
        for (int j = 0; j < NP; ++j) {
          const float t = ftz(std::fma(a_hi, from_bf16(std::uint16_t(b[j] >> 16)), c[j]));
          c[j] = ftz(std::fma(a_lo, from_bf16(std::uint16_t(b[j])), t));
        }
      }
      std::copy_n(c, NP, out + r * ld + h * NP);
    }
  }
}

#ifdef GG_BF16_X86
template <bool SLIVER>
GG_BF16_TILE void tile_native(TileA A, const u32* b0, const u32* b1,
                                                                                i64 KP, float* out, i64 ld) {
  __m512 c0[MR], c1[MR];
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  const u32* a = A.a;
  const i64 rs = SLIVER ? 1 : A.rs;
  for (i64 k = 0; k < KP; ++k) {
    const __m512bh vb0 = (__m512bh)_mm512_loadu_si512(b0 + k * NP);
    const __m512bh vb1 = (__m512bh)_mm512_loadu_si512(b1 + k * NP);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512bh va = (__m512bh)_mm512_set1_epi32(int(a[r * rs]));
      c0[r] = _mm512_dpbf16_ps(c0[r], va, vb0);
      c1[r] = _mm512_dpbf16_ps(c1[r], va, vb1);
    }
    a += SLIVER ? MR : 1;
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(out + r * ld, c0[r]);
    _mm512_storeu_ps(out + r * ld + NP, c1[r]);
  }
}
#endif

// Rows [m0, m1) (at most MB) and columns [j0, j1) of C from the rows' A pairs in `abuf`
// (pack_a's layout), column tile by column tile (a tile's panels stay in cache across the
// block's row tiles).
void block(const Problem& P, const u32* b, i64 m0, i64 m1, i64 j0, i64 j1, const std::vector<u32>& abuf,
           Bf16Path path) {
  const i64 KP = P.KP, rows = m1 - m0;
  const bool plain = P.alpha == 1.f && P.beta == 0.f;
  alignas(64) float acc[MR][NR];
  thread_local std::vector<u32> edge;  // the block's last rows, the missing ones repeating the last
  for (i64 n0 = j0; n0 < j1; n0 += NR) {
    const int cols = int(std::min<i64>(NR, j1 - n0));
    const u32* b0 = b + (n0 / NP) * P.b_stride * NP;
    const u32* b1 = cols > NP ? b0 + P.b_stride * NP : b0;  // one panel: the second is a copy, not stored
    for (i64 r0 = 0; r0 < rows; r0 += MR) {
      const int tr = int(std::min<i64>(MR, rows - r0));
      // Rows past the block in a tile: the last row again (rows) or the sliver's zeros.
      TileA A = P.ta ? TileA{abuf.data() + r0 * KP, 1, MR} : TileA{abuf.data() + r0 * KP, KP, 1};
      if (!P.ta && tr < MR) {
        edge.resize(std::size_t(MR * KP));
        for (int r = 0; r < MR; ++r) std::copy_n(A.a + std::min(r, tr - 1) * KP, KP, edge.data() + r * KP);
        A = TileA{edge.data(), KP, 1};
      }
      float* c = P.C + (m0 + r0) * P.ldc + (n0 - P.c_col0);
      const bool direct = plain && tr == MR && cols == NR;  // the sums go straight to C
      float* out = direct ? c : &acc[0][0];
      const i64 ld = direct ? P.ldc : NR;
#ifdef GG_BF16_X86
      if (path == Bf16Path::native) {
        if (P.ta) tile_native<true>(A, b0, b1, KP, out, ld);
        else tile_native<false>(A, b0, b1, KP, out, ld);
      } else
#endif
        tile_emulated(A, b0, b1, KP, out, ld);
      if (direct) continue;
      // alpha and beta, which both paths share (their sums are already flushed as the
      // instruction does).
      for (int r = 0; r < tr; ++r) {
        float* cr = c + r * P.ldc;
        for (int j = 0; j < cols; ++j) {
          const float v = P.alpha * acc[r][j];
          cr[j] = P.beta == 0.f ? v : v + P.beta * cr[j];
        }
      }
    }
  }
}

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
               std::int64_t ldc, Bf16Path path, const std::function<void(std::int64_t, std::int64_t)>* rows_done) {
  if (M <= 0 || N <= 0) return;
  if (path == Bf16Path::native && !cpu_has_avx512_bf16()) path = Bf16Path::emulated;
  const Problem P{{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc}, (K + 1) / 2, (N + NP - 1) / NP,
                  path == Bf16Path::native, (K + 1) / 2, 0};
  // op(B) packed once, shared by every block (the caller's buffer: it waits for the blocks).
  thread_local std::vector<u32> packed_b;
  packed_b.resize(std::size_t(P.panels * P.KP * NP));
  u32* const b = packed_b.data();  // (a thread_local named in the lambdas would be each worker's own)
  const bool parallel = 2.0 * double(M) * double(N) * double(K) >= PARALLEL_FLOPS;
  // Packing items: one panel (B transposed) or QB of them (not transposed).
  const i64 per_item = trans_b ? 1 : QB, pack_items = (P.panels + per_item - 1) / per_item;
  auto pack_panels = [&](i64 i0, i64 i1) { pack_b(P, i0 * per_item, std::min(P.panels, i1 * per_item), b); };
  // Work items: blocks of MB rows, each split into `chunks` ranges of whole column tiles when
  // there are too few blocks to keep every thread busy (a weight gradient's 128 rows are three
  // blocks). Each value is summed the same way whichever item holds it; a block's rows are
  // reported done by the thread that finishes its last range.
  const i64 blocks = (M + MB - 1) / MB, tiles = (N + NR - 1) / NR;
  const i64 want = parallel ? 4 * i64(num_threads()) : 1;
  const i64 split = std::clamp<i64>((want + blocks - 1) / blocks, 1, tiles);  // ranges a block, at most
  const i64 per_chunk = (tiles + split - 1) / split;                          // column tiles a range
  const i64 chunks = (tiles + per_chunk - 1) / per_chunk, chunk_cols = per_chunk * NR;  // no range is empty
  std::unique_ptr<std::atomic<i64>[]> left;
  if (rows_done && chunks > 1) {
    left.reset(new std::atomic<i64>[std::size_t(blocks)]);
    for (i64 k = 0; k < blocks; ++k) left[std::size_t(k)].store(chunks, std::memory_order_relaxed);
  }
  auto run_items = [&](i64 i0, i64 i1) {
    thread_local std::vector<u32> abuf;
    i64 packed = -1;  // the block whose A pairs abuf holds
    for (i64 i = i0; i < i1; ++i) {
      const i64 k = i / chunks, m0 = k * MB, m1 = std::min(M, m0 + MB);
      const i64 j0 = (i % chunks) * chunk_cols, j1 = std::min(N, j0 + chunk_cols);
      if (packed != k) {
        abuf.resize(std::size_t((m1 - m0 + MR - 1) / MR * MR * P.KP));
        pack_a(P, m0, m1, abuf.data());
        packed = k;
      }
      block(P, b, m0, m1, j0, j1, abuf, path);
      if (rows_done && (!left || left[std::size_t(k)].fetch_sub(1, std::memory_order_acq_rel) == 1))
        (*rows_done)(m0, m1);
    }
  };
  if (parallel) {
    parallel_for(pack_items, 1, pack_panels);
    parallel_for(blocks * chunks, 1, run_items);
  } else {
    pack_panels(0, pack_items);
    run_items(0, blocks * chunks);
  }
}

// ---- op(B) packed once, products against parts of it ---------------------------------------

Bf16PackedB::Bf16PackedB(bool trans_b, std::int64_t K, std::int64_t N, const float* B, std::int64_t ldb, Bf16Path path)
    : K_(K), N_(N), native_(path == Bf16Path::native && cpu_has_avx512_bf16()) {
  const Problem P{{false, trans_b, 0, N, K, 1.f, nullptr, 0, B, ldb, 0.f, nullptr, 0}, (K + 1) / 2, (N + NP - 1) / NP,
                  native_, (K + 1) / 2, 0};
  b_.resize(std::size_t(P.panels * P.KP * NP));
  pack_b(P, 0, P.panels, b_.data());
}

void Bf16PackedB::product(bool trans_a, std::int64_t M, const float* A, std::int64_t lda, std::int64_t j0,
                          std::int64_t cols, std::int64_t k0, std::int64_t k1, float* C, std::int64_t ldc) const {
  if (j0 < 0 || cols < 0 || j0 + cols > N_ || j0 % NP || k0 < 0 || k0 % 2 || k1 < k0 || k1 > K_ || (k1 % 2 && k1 != K_))
    throw std::invalid_argument("Bf16PackedB::product: columns from a multiple of 16, depth [k0, k1) in whole pairs");
  if (M <= 0 || cols <= 0) return;
  const i64 K = k1 - k0, KP = (K + 1) / 2;
  // op(A)'s terms [k0, k1) and the panels' pairs from k0 / 2: the sums a gemm_bf16 of those parts makes
  const float* a = trans_a ? A + k0 * lda : A + k0;
  const Problem P{{trans_a, false, M, cols, K, 1.f, a, lda, nullptr, 0, 0.f, C, ldc}, KP, 0, native_, (K_ + 1) / 2, j0};
  const Bf16Path path = native_ ? Bf16Path::native : Bf16Path::emulated;
  thread_local std::vector<u32> abuf;
  for (i64 m0 = 0; m0 < M; m0 += MB) {
    const i64 m1 = std::min(M, m0 + MB);
    abuf.resize(std::size_t((m1 - m0 + MR - 1) / MR * MR * KP));
    pack_a(P, m0, m1, abuf.data());
    block(P, b_.data() + (k0 / 2) * NP, m0, m1, j0, j0 + cols, abuf, path);
  }
}

// ---- the peak ---------------------------------------------------------------------------
namespace {
constexpr int CHAINS = 12;

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

const Probe kDp{dp_loop, 4.0 * 16 * CHAINS};
}  // namespace

Bf16Peak measure_bf16_peak(double seconds, int repeats) {
  Bf16Peak p;
  p.threads = num_threads();
  if (!cpu_has_avx512_bf16()) return p;
  seconds = std::max(seconds, 1e-3);
  repeats = std::max(repeats, 1);
  const std::int64_t iters = probe_iterations(kDp, seconds, 1 << 14);
  for (int r = 0; r < repeats; ++r) p.per_core_gflops = std::max(p.per_core_gflops, probe_gflops(kDp, 1, iters));
  for (int r = 0; r < repeats; ++r) p.total_gflops = std::max(p.total_gflops, probe_gflops(kDp, p.threads, iters));
  return p;
}

}  // namespace gg
