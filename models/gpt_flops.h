// The model FLOPs of one training step of the reference GPT: the count a benchmark divides
// by its time, with the formula it used spelled out. Only matrix products are counted,
// in the usual way (Kaplan et al. 2020; the PaLM paper's MFU): 6 flops per parameter per
// token (2 forward, 4 backward) plus the attention products, which have no parameters.
// Not a count of what the kernels execute (element-wise work, softmax, norms are left out).
#pragma once

#include <cstdint>
#include <string>

#include "gpt.h"

namespace gg::models {

struct StepFlops {
  std::int64_t params = 0;     // N: every parameter once (a tied head is the token embedding)
  std::int64_t tokens = 0;     // B * T
  double dense = 0;            // 6 * N * B * T
  double attention = 0;        // 12 * L * B * T * T * D
  double total = 0;            // dense + attention
  std::string formula;         // the formula with its numbers, e.g. "6*N*B*T + 12*L*B*T*T*D = ..."
};

// FLOPs of one step (forward + backward) on a (B, T) batch. N counts every parameter of
// the declared model once: the matrices, biases, norm gains and position embeddings (the
// last three do almost no matrix work, so N slightly overstates it; they are under 2% of
// N for the bench configs). The attention term is QK^T and (weights @ V), 2*B*T*T*D each
// forward and twice that backward, per layer, over the full T x T square (the causal
// mask does not halve what is computed). Requires B >= 1 and 1 <= T <= block_size.
StepFlops gpt_step_flops(const GptConfig& c, std::int64_t B, std::int64_t T);

}  // namespace gg::models
