// A reference interpreter: evaluates a graph's nodes in double precision, one plain scalar
// loop per primitive (each primitive's record holds its own, ops/ir/op_rule.h), with no
// planning, no arena and no SIMD. It is the f64 execution of
// the same graph that the gradient checker differentiates numerically, and the yardstick
// the f32 executor is tested against. Slow on purpose; not for training.
#pragma once

#include <map>
#include <span>
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

// ---- for the primitives' f64 rules --------------------------------------------------

// What a record's f64 rule gets: the node, its inputs' values, the leaves' values, and
// its output (shape and dtype set, values zero) to fill. Errors go through g.fail(n, ...).
struct F64Args {
  const Graph& g;
  const Node& n;
  std::span<const F64Value* const> inputs;
  const F64Leaves& leaves;
  F64Value& out;
  const F64Value& in(std::size_t i) const { return *inputs[i]; }
};

namespace f64 {
// Strides of `in` aligned to the rank of `out`, 0 on broadcast (size-1 or missing) dims.
std::vector<std::int64_t> aligned_strides(const Shape& out, const Shape& in);
// The flat index into an input with aligned strides `st` of output element `o`.
std::int64_t source_index(const Shape& out, const std::vector<std::int64_t>& st, std::int64_t o);
// A shape seen as (outer, n, inner) around `axis`.
struct Split3 {
  std::int64_t outer = 1, n = 1, inner = 1;
};
Split3 split_at(const Shape& s, std::int64_t axis);
// Element-wise with broadcasting: out[i] = f(in0[.]) or f(in0[.], in1[.]).
template <class F>
void unary(const F64Args& a, F f) {
  for (std::size_t i = 0; i < a.out.v.size(); ++i) a.out.v[i] = f(a.in(0).v[i]);
}
template <class F>
void binary(const F64Args& a, F f) {
  const Shape& s = a.out.shape;
  auto sa = aligned_strides(s, a.in(0).shape), sb = aligned_strides(s, a.in(1).shape);
  for (std::int64_t i = 0; i < std::int64_t(a.out.v.size()); ++i)
    a.out.v[std::size_t(i)] = f(a.in(0).v[std::size_t(source_index(s, sa, i))], a.in(1).v[std::size_t(source_index(s, sb, i))]);
}
}  // namespace f64

}  // namespace gg
