// The gradient checker: compares the gradient graph that grad() builds against central
// differences of the forward value, for users and tests alike. Differences are formed
// in double precision from float evaluations, so the step and tolerances are sized for
// float32 rounding (errors from a wrong rule are O(1), far above them).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../ops/runtime/executor.h"
#include "../ops/ir/graph.h"
#include "../ops/ir/tensor.h"

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

// ---- every parameter of a model against an f64 execution of the same graph ----------

struct ParamCheckOptions {
  double step = 2e-4;     // step of the fourth-order central difference, in double: h = step * max(1, |x|)
  double rtol = 1e-3;     // a coordinate passes when its relative error is <= rtol
  double floor = 1e-5;    // relative to max(|a|, |n|, floor): gradients below it are compared absolutely
  int max_elements = 16;  // per parameter: evenly spread coordinates, plus the largest |analytic|
  // The executor's errors relative to the parameter's largest |analytic| gradient as well
  // (max(|a|, |n|, floor, that)): for products with bf16 operands, whose rounding is a
  // fraction of the sums' terms, not of a coordinate whose terms cancel. The f64 column
  // stays per coordinate.
  bool relative_to_largest = false;
};

struct ParamCheck {
  std::string name;
  Shape shape;
  int checked = 0;               // coordinates compared
  double worst_rel = 0;          // max over them of |a - n| / max(|a|, |n|, floor[, largest |a|])
  std::int64_t worst_index = -1; // flat index of that coordinate
  double analytic = 0, numeric = 0;  // its two values
  // The same gradient graph run by eval_f64 instead of the f32 executor, against the same
  // differences: the gradient rules' own error, free of f32 rounding (typically < 1e-8).
  double worst_rel_f64 = 0;
  bool ok = true;                // worst_rel <= rtol and worst_rel_f64 <= rtol
};

// Checks d(loss)/d(p) for each param node p in `params`: the analytic gradient is the
// gradient graph grad() appends, run by the f32 executor (what training uses) and by
// eval_f64 (worst_rel_f64); the
// numeric one is a fourth-order central difference of the loss evaluated by eval_f64 (ops/ir/eval_f64.h)
// with the coordinate perturbed in double. `store` is read, never written; `inputs` are
// fed by name. Throws GraphError for a node that is not a parameter, a non-scalar loss
// and a graph with random nodes (dropout in training mode: eval_f64 cannot reproduce it).
std::vector<ParamCheck> gradcheck_params(Graph& g, NodeId loss, const std::vector<NodeId>& params,
                                         const ParamStore& store, const std::map<std::string, Tensor>& inputs = {},
                                         ParamCheckOptions opts = {});

}  // namespace gg
