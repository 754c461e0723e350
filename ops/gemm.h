// Single-precision GEMM on row-major matrices: the one entry point every matmul kernel
// calls, so a faster implementation lands here without touching the executor.
#pragma once

#include <cstdint>

namespace gg {

// Told as rows of C become final (every column, the whole sum): rows_done(r0, r1) for
// [r0, r1), from the thread that computed them, while they are still in its cache. A
// borrowed callable (it must outlive the call); for GEMM epilogues (ops/executor.h).
class GemmRowsDone {
 public:
  template <class F>
  explicit GemmRowsDone(F& f)
      : ctx_(&f), fn_([](void* c, std::int64_t r0, std::int64_t r1) { (*static_cast<F*>(c))(r0, r1); }) {}
  void operator()(std::int64_t r0, std::int64_t r1) const { fn_(ctx_, r0, r1); }

 private:
  void* ctx_;
  void (*fn_)(void*, std::int64_t, std::int64_t);
};

// Rows of C in one call to rows_done start at a multiple of this (and end at one, or at M).
inline constexpr std::int64_t gemm_rows_done_unit = 48;

// C = alpha * op(A) @ op(B) + beta * C, all row-major.
// op(A) is (M, K): A is (M, K) with row stride lda, or (K, M) when trans_a.
// op(B) is (K, N): B is (K, N) with row stride ldb, or (N, K) when trans_b.
// C is (M, N) with row stride ldc. beta == 0 ignores what C held (even NaN).
// Threads itself with parallel_for; safe to call from inside a parallel_for (runs serially).
// With rows_done, every row of C is reported once, in ranges that start at a multiple of
// gemm_rows_done_unit and end at one or at M (threads then split C by such blocks of rows);
// C's values are the same with or without.
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
          float alpha, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
          float beta, float* C, std::int64_t ldc, const GemmRowsDone* rows_done = nullptr);

// The depth of one pass of the sum: C accumulates the terms k in [0, 256), then adds those
// in [256, 512), and so on (each pass in order). A caller that splits a sum over several
// calls at multiples of it (beta = 1 after the first) gets the same bits as one call.
inline constexpr std::int64_t gemm_depth_block = 256;

// The plain triple loop (double accumulation), the reference the fast GEMM is tested against.
void gemm_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                    float alpha, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float beta, float* C, std::int64_t ldc);

}  // namespace gg
