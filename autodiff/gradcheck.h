// The gradient checker: compares the gradient graph that grad() builds against central
// differences of the forward value, for users and tests alike. Differences are formed
// in double precision from float evaluations, so the step and tolerances are sized for
// float32 rounding (errors from a wrong rule are O(1), far above them).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../ops/executor.h"
#include "../ops/graph.h"
#include "../ops/tensor.h"

namespace gg {

struct GradcheckOptions {
  double step = 1e-2;      // central-difference step h (scaled by max(1, |x|))
  double atol = 2e-3;      // pass if |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|)
  double rtol = 2e-2;
  int max_elements = 64;   // per tensor; larger tensors are sampled at evenly spread positions
};

struct GradcheckResult {
  bool ok = true;
  double worst_abs = 0;    // largest |analytic - numeric| seen
  std::string worst;       // where: "name[index]: analytic a vs numeric b"
  int checked = 0;         // elements compared
};

// Checks d(out)/d(wrt) for each f32 param or input node in wrt. `out` must be a scalar.
// Params come from (and are restored in) `params`; inputs are fed from `inputs` by name.
GradcheckResult gradcheck(Graph& g, NodeId out, const std::vector<NodeId>& wrt, ParamStore& params,
                          const std::map<std::string, Tensor>& inputs = {}, GradcheckOptions opts = {});

}  // namespace gg
