// Single-precision GEMM on row-major matrices: the one entry point every matmul kernel
// calls, so a faster implementation lands here without touching the executor.
#pragma once

#include <cstdint>
#include <functional>

namespace gg {

// Called with ranges [r0, r1) of C's rows once they are final (every column, the whole sum):
// each row once, before gemm returns, possibly from several threads at once, a range on the
// thread that finished it while its rows are still in that core's cache. A GEMM epilogue:
// the executor runs the element-wise group that reads C there (ops/runtime/executor.cpp). It may
// call parallel_for (which runs serially inside gemm's threads).
using GemmRowsDone = std::function<void(std::int64_t, std::int64_t)>;

// One product's arguments, as gemm() takes them (the f32 and the bf16 GEMM's workers share it).
struct GemmProblem {
  bool ta, tb;
  std::int64_t M, N, K;
  float alpha;
  const float* A;
  std::int64_t lda;
  const float* B;
  std::int64_t ldb;
  float beta;
  float* C;
  std::int64_t ldc;
};

// C = alpha * op(A) @ op(B) + beta * C, all row-major.
// op(A) is (M, K): A is (M, K) with row stride lda, or (K, M) when trans_a.
// op(B) is (K, N): B is (K, N) with row stride ldb, or (N, K) when trans_b.
// C is (M, N) with row stride ldc. beta == 0 ignores what C held (even NaN).
// Threads itself with parallel_for; safe to call from inside a parallel_for (runs serially).
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
          float alpha, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
          float beta, float* C, std::int64_t ldc, const GemmRowsDone* rows_done = nullptr);

// Blocks of C rows one thread took from another's share, since the process started. A
// large product's rows go out to the threads in blocks, and a thread done with its own
// takes the rest of a slower one's (see gemm.cpp); a statistic for tests and profiles.
std::uint64_t gemm_stolen_blocks();

// Products summed in two halves (gemm_depth_split), since the process started; for tests.
std::uint64_t gemm_split_depth_calls();

// The depth of one pass of the sum: C accumulates the terms k in [0, 256), then adds those
// in [256, 512), and so on (each pass in order). A caller that splits a sum over several
// calls at multiples of it (beta = 1 after the first) gets the same bits as one call,
// unless the product is summed in two halves (gemm_depth_split).
inline constexpr std::int64_t gemm_depth_block = 256;

// Where a product's sum splits in two, or 0 when it does not. A weight gradient x^T @ dy
// (trans_a, not trans_b) of at least two depth blocks and at most 2^20 results is summed as
// C = (beta * C + alpha * terms [0, K0)) + alpha * terms [K0, K), each half in passes of
// gemm_depth_block from its own start, the second apart and added last, so that each of two
// threads reads the half of the rows it likely wrote. It depends on the shape alone (and on
// GG_SPLIT_DEPTH=0, which turns it off), never on the threads. A caller that splits such a
// sum over several calls splits at K0 too, as ops/passes/masked.cpp does.
std::int64_t gemm_depth_split(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K);

// The plain triple loop (double accumulation), the reference the fast GEMM is tested against.
void gemm_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                    float alpha, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float beta, float* C, std::int64_t ldc);

}  // namespace gg
