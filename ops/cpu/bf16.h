// bfloat16 at the leaves: the rounding of an f32 to bf16 (the top 16 bits, rounded to nearest
// even), and the one matrix product with bf16 operands and f32 accumulation that mixed
// precision calls. Where the CPU has AVX512_BF16 (chosen at run time from CPUID, so one
// binary serves every CPU) the product uses VDPBF16PS, two bf16 products summed into an f32
// lane per instruction; elsewhere an emulated path does the same arithmetic in the same
// order (the same bits; GG_BF16_NATIVE=0 forces it, so both are tested on any machine).
// Not here: where the graph changes precision (the planner's business).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gg {

// f32 -> bf16, rounded to nearest even; a NaN stays a (quiet) NaN, infinities stay.
inline std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);  // NaN: keep it one
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}
inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}
// x rounded to the nearest bf16, as an f32.
inline float round_bf16(float x) { return from_bf16(to_bf16(x)); }

// Whether this CPU runs AVX512_BF16 (false off x86 and in the scalar build).
bool cpu_has_avx512_bf16();

enum class Bf16Path { native, emulated };
// The path products take: native where the CPU has AVX512_BF16 and GG_BF16_NATIVE is not 0.
Bf16Path bf16_path();
// "AVX512_BF16 (VDPBF16PS)" or "emulated in f32 (this CPU has no AVX512_BF16: not faster than f32)".
std::string bf16_path_name(Bf16Path path = bf16_path());

// C = alpha * op(A) @ op(B) + beta * C with the operands rounded to bf16 (to_bf16, a
// denormal read as zero first, as VCVTNE2PS2BF16 does) and the products summed in f32:
// row-major, as gemm() (ops/cpu/gemm.h). Each result is the sum over k in
// pairs (k = 2p, 2p + 1) in increasing p, VDPBF16PS's order: acc += a[2p+1] * b[2p+1], then
// acc += a[2p] * b[2p], each a fused multiply-add rounded to f32 (denormal operands, sums and
// results read and written as zero, as the instruction does); then alpha * acc + beta * C.
// beta == 0 ignores what C held. Both paths give the same bits. rows_done, when given, is
// called with ranges of C's rows once they are final (as gemm's, ops/cpu/gemm.h), from the
// thread that finished them.
void gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc, Bf16Path path = bf16_path(),
               const std::function<void(std::int64_t, std::int64_t)>* rows_done = nullptr);

// op(B) (K x N, row-major as gemm_bf16's B) rounded and packed once, for several products
// against parts of it: the planner's masked attention products, whose blocks of rows each
// need a range of op(B)'s columns or of its depth. product() sets C = op(A)[:, k0:k1] @
// op(B)[k0:k1, j0:j0+cols] (op(A) is M x K; C's column 0 is op(B)'s column j0), the bits
// gemm_bf16 gives on those parts. j0 is a multiple of 16 and [k0, k1) holds whole pairs (k0
// even, k1 even or K), else std::invalid_argument. Runs on the calling thread.
class Bf16PackedB {
 public:
  Bf16PackedB(bool trans_b, std::int64_t K, std::int64_t N, const float* B, std::int64_t ldb, Bf16Path path = bf16_path());
  void product(bool trans_a, std::int64_t M, const float* A, std::int64_t lda, std::int64_t j0, std::int64_t cols,
               std::int64_t k0, std::int64_t k1, float* C, std::int64_t ldc) const;

 private:
  std::vector<std::uint32_t> b_;
  std::int64_t K_, N_;
  bool native_;
};

// The machine's bf16 dot-product peak, as measure_fma_peak (ops/cpu/peak.h) measures the f32
// one: independent VDPBF16PS accumulators, one thread then every thread; 4 flops per f32
// lane per instruction (two multiplies, two adds). Zero without AVX512_BF16.
struct Bf16Peak {
  double per_core_gflops = 0, total_gflops = 0;
  int threads = 0;
};
Bf16Peak measure_bf16_peak(double seconds = 0.05, int repeats = 10);

}  // namespace gg
