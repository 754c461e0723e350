// The matmul kernel with a GEMM epilogue: for the executor, which runs the fused group that
// reads a product's output on each block of rows as the GEMM finishes it (ops/executor.h).
// Private to ops/.
#pragma once

#include "gemm.h"
#include "op_rule.h"

namespace gg {

// Whether a matmul of these operand shapes runs as one GEMM whose rows are the output's
// rows flattened, (..., M, N) -> (prod(...) * M, N): a 2-D right operand without a
// transposed left one, or no batch at all.
bool matmul_is_one_gemm(const Shape& a, const Shape& b, bool trans_a);

// The matmul kernel (requires matmul_is_one_gemm), reporting rows of its flattened output
// to rows_done as the GEMM finishes them. The same values as the kernel of matmul_rule.
void matmul_rows_done(const KernelArgs& a, const GemmRowsDone& rows_done);

}  // namespace gg
