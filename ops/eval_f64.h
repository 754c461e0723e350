// A reference interpreter: evaluates a graph's nodes in double precision, one plain scalar
// loop per primitive, with no planning, no arena and no SIMD. It is the f64 execution of
// the same graph that the gradient checker differentiates numerically, and the yardstick
// the f32 executor is tested against. Slow on purpose; not for training.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph.h"
#include "tensor.h"

namespace gg {

// A value in double: f32 and i32 nodes alike (i32 values are exact in a double).
struct F64Value {
  Shape shape;
  DType dtype = DType::f32;
  std::vector<double> v;  // row-major, numel(shape) entries
};

// Leaf values by name: params and inputs. Constants come from the graph.
using F64Leaves = std::map<std::string, F64Value>;

// The params of `store` and the tensors of `inputs`, widened to double.
F64Leaves f64_leaves(const ParamStore& store, const std::map<std::string, Tensor>& inputs = {});
F64Value to_f64(const Tensor& t);

// Values of `outputs` (and of every node they need), computed in double.
// Requires: every param and input the outputs need is in `leaves` with the node's shape
// and dtype. Throws GraphError naming the node for a missing or mis-shaped leaf, an index
// out of range, and a `random` node (its noise is drawn by the executor's generator; the
// reference interpreter refuses graphs with random nodes, e.g. dropout in training mode).
std::vector<F64Value> eval_f64(const Graph& g, const std::vector<NodeId>& outputs, const F64Leaves& leaves);

}  // namespace gg
