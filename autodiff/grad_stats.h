// Looking at gradients: statistics of a step's gradients (per parameter norm, largest
// magnitude, fraction of exact zeros, the global norm before and after clipping), and a
// graph analysis that finds parameters whose gradient is zero by construction.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../ops/ir/graph.h"
#include "param_grad.h"

namespace gg {

struct ParamGradStats {
  std::string name;
  std::int64_t numel = 0;
  double norm = 0;           // L2 norm (accumulated in double)
  double max_abs = 0;        // largest |g| over the finite entries
  double zero_fraction = 0;  // share of entries exactly 0
  std::int64_t nonfinite = 0;  // NaN and Inf entries (left out of norm and max_abs)
};

struct GradStats {
  std::vector<ParamGradStats> params;  // in the order given
  double global_norm = 0;              // L2 norm over every finite entry, before clipping
  double clipped_norm = 0;             // the global norm clip_grad_norm(pg, max_norm) leaves
};

// Statistics of the gradients as they are now (call before clip_grad_norm); with
// max_norm > 0, clipped_norm is the norm after clip_grad_norm's scaling by
// min(1, max_norm / (norm + 1e-6)), else it equals global_norm. Reads only.
GradStats grad_stats(std::span<const ParamGrad> pg, double max_norm = 0);

// A parameter whose gradient is zero whatever the data and the weights, and why.
struct ZeroGrad {
  std::string name;
  std::string reason;
};

// Which of `params` have a structurally zero d(loss)/d(param), each reported once, in
// the order given, with the reason:
//  - no path: the loss does not read the parameter at all;
//  - every path passes through an op with no gradient (compare, argmax: step functions);
//  - every path is cancelled by a shift invariance: the parameter adds the same amount
//    to every entry of a row that is then normalized by x - max(x) over that row (the
//    start of softmax and log_softmax), as the attention key bias does: q . b_k is the
//    same for every key, so the softmax over keys removes it (ops/ir/tangent.h states the rule).
// Requires params to be param nodes of g (throws GraphError otherwise) and loss a node of g.
std::vector<ZeroGrad> structurally_zero_grads(const Graph& g, NodeId loss, const std::vector<NodeId>& params);

}  // namespace gg
