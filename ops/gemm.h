// Single-precision GEMM on row-major matrices: the one entry point every matmul kernel
// calls, so a faster implementation lands here without touching the executor.
#pragma once

#include <cstdint>

namespace gg {

// C = alpha * op(A) @ op(B) + beta * C, all row-major.
// op(A) is (M, K): A is (M, K) with row stride lda, or (K, M) when trans_a.
// op(B) is (K, N): B is (K, N) with row stride ldb, or (N, K) when trans_b.
// C is (M, N) with row stride ldc. beta == 0 ignores what C held (even NaN).
// Threads itself with parallel_for; safe to call from inside a parallel_for (runs serially).
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
          float alpha, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
          float beta, float* C, std::int64_t ldc);

// Blocks of C rows one thread took from another's share, since the process started. A
// large product's rows go out to the threads in blocks, and a thread done with its own
// takes the rest of a slower one's (see gemm.cpp); a statistic for tests and profiles.
std::uint64_t gemm_stolen_blocks();

// Products whose depth slices ran side by side on several threads, since the process started
// (a weight gradient's x^T @ dy: see gemm.cpp); a statistic for tests.
std::uint64_t gemm_split_depth_calls();

// The depth of one pass of the sum: C accumulates the terms k in [0, 256), then adds those
// in [256, 512), and so on (each pass in order). A caller that splits a sum over several
// calls at multiples of it (beta = 1 after the first) gets the same bits as one call.
inline constexpr std::int64_t gemm_depth_block = 256;

// The plain triple loop (double accumulation), the reference the fast GEMM is tested against.
void gemm_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                    float alpha, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float beta, float* C, std::int64_t ldc);

}  // namespace gg
