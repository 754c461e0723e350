// The reference interpreter: each node's value by its record's f64 rule, in order; and the
// helpers those rules share (an input's strides aligned to the output, zero on broadcast
// dims; a tensor seen as (outer, n, inner) around an axis).
#include "ops/ir/eval_f64.h"

#include <fmt/format.h>

#include <cmath>

#include "ops/ir/op_rule.h"

namespace gg {

namespace f64 {
// Strides of `in` aligned to the rank of `out`, 0 on broadcast (size-1 or missing) dims.
std::vector<std::int64_t> aligned_strides(const Shape& out, const Shape& in) {
  std::vector<std::int64_t> st(out.size(), 0);
  const Shape is = strides_of(in);
  const std::size_t off = out.size() - in.size();
  for (std::size_t d = 0; d < in.size(); ++d) st[off + d] = in[d] == 1 ? 0 : is[d];
  return st;
}

// The flat index into an input with aligned strides `st` of output element `o`.
std::int64_t source_index(const Shape& out, const std::vector<std::int64_t>& st, std::int64_t o) {
  std::int64_t idx = 0;
  for (std::size_t d = out.size(); d-- > 0;) {
    idx += (o % out[d]) * st[d];
    o /= out[d];
  }
  return idx;
}

Split3 split_at(const Shape& s, std::int64_t axis) {
  Split3 r;
  r.n = s[std::size_t(axis)];
  for (std::int64_t i = 0; i < axis; ++i) r.outer *= s[std::size_t(i)];
  for (std::size_t i = std::size_t(axis) + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

}  // namespace f64

namespace {

// One node's value from its inputs' values, by its record's rule.
F64Value eval_node(const Graph& g, NodeId id, const std::vector<F64Value>& val, const F64Leaves& leaves) {
  const Node& n = g.node(id);
  F64Value out{n.shape, n.dtype, std::vector<double>(std::size_t(numel(n.shape)), 0.0)};
  std::vector<const F64Value*> in;
  for (NodeId i : n.inputs) in.push_back(&val[std::size_t(i)]);
  const OpRule& rule = op_rule(n.op);
  GG_CHECK(rule.f64 != nullptr);
  rule.f64(F64Args{g, n, in, leaves, out});
  return out;
}

}  // namespace

F64Value to_f64(const Tensor& t) {
  F64Value v{t.shape(), t.dtype(), std::vector<double>(std::size_t(t.numel()))};
  for (std::int64_t i = 0; i < t.numel(); ++i)
    v.v[std::size_t(i)] = t.dtype() == DType::i32 ? double(t.i()[i]) : double(t.f()[i]);
  return v;
}

F64Leaves f64_leaves(const ParamStore& store, const std::map<std::string, Tensor>& inputs) {
  F64Leaves l;
  for (const auto& [name, t] : store.all()) l[name] = to_f64(t);
  for (const auto& [name, t] : inputs) l[name] = to_f64(t);
  return l;
}

std::vector<F64Value> eval_f64(const Graph& g, const std::vector<NodeId>& outputs, const F64Leaves& leaves) {
  for (NodeId o : outputs)
    if (o < 0 || o >= g.size())
      throw GraphError(fmt::format("eval_f64: output %{} is not a node of this graph (it has {} nodes)", o, g.size()));
  std::vector<F64Value> val(std::size_t(g.size()));
  for (NodeId id : ancestors(g, outputs)) val[std::size_t(id)] = eval_node(g, id, val, leaves);
  std::vector<F64Value> out;
  for (NodeId o : outputs) out.push_back(val[std::size_t(o)]);
  return out;
}

}  // namespace gg
