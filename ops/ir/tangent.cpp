// Tangent structure: the generic propagation (ops/ir/tangent.h) that asks each primitive's
// record for its rule, and the helpers those rules share. The rules themselves sit in the
// records: element-wise ones in ops/primitives/elementwise_fn.h, the others beside their kernels.
#include "ops/ir/tangent.h"

#include <cmath>

namespace gg {

bool tangent_varies(const TangentShape* t) { return t && !t->zero; }

std::vector<char> broadcast_axes(const Graph& g, const Node& n, std::size_t i) {
  const Shape& s = g.node(n.inputs[i]).shape;
  const std::size_t r = n.shape.size(), off = r - s.size();
  std::vector<char> c(r, 1);
  for (std::size_t d = 0; d < s.size(); ++d) c[off + d] = s[d] == 1;
  return c;
}

std::vector<char> aligned_tangent(const Graph& g, const Node& n, std::size_t i, const TangentShape* t) {
  std::vector<char> c = broadcast_axes(g, n, i);
  if (!tangent_varies(t)) return std::vector<char>(n.shape.size(), 1);
  const std::size_t off = n.shape.size() - t->constant.size();
  for (std::size_t d = 0; d < t->constant.size(); ++d) c[off + d] = c[off + d] || t->constant[d];
  return c;
}

void and_into(std::vector<char>& a, const std::vector<char>& b) {
  for (std::size_t d = 0; d < a.size(); ++d) a[d] = a[d] && b[d];
}

void tangent_additive(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
  out.constant.assign(n.shape.size(), 1);
  for (std::size_t i = 0; i < n.inputs.size(); ++i) and_into(out.constant, aligned_tangent(g, n, i, in[i]));
}

void tangent_sub(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
  // The cancellation: X - max(X, k, keepdim) with X's tangent constant along k; the max
  // may be detached (op::stop_gradient of it, as softmax and log_softmax build it).
  const Node* mp = &g.node(n.inputs[1]);
  if (mp->attrs.no_grad && mp->op == OpKind::reshape && mp->shape == g.node(mp->inputs[0]).shape)
    mp = &g.node(mp->inputs[0]);
  const Node& m = *mp;
  if (m.op == OpKind::max && m.attrs.keepdim && m.inputs[0] == n.inputs[0] && tangent_varies(in[0]) &&
      in[0]->constant[std::size_t(m.attrs.axis)]) {
    out.cancelled = true;
    return;
  }
  tangent_additive(g, n, in, out);
}

void tangent_pointwise(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out,
                       unsigned linear) {
  out.constant.assign(n.shape.size(), 1);
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    if (!tangent_varies(in[i])) continue;
    and_into(out.constant, aligned_tangent(g, n, i, in[i]));
    const bool linear_in_i = (linear >> i) & 1u;
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      if (j != i || !linear_in_i) and_into(out.constant, broadcast_axes(g, n, j));
  }
}

TangentShape seed_tangent(const Graph& g, NodeId param) {
  TangentShape t;
  t.zero = false;
  const Shape& s = g.node(param).shape;
  t.constant.assign(s.size(), 0);
  for (std::size_t d = 0; d < s.size(); ++d) t.constant[d] = s[d] == 1;
  return t;
}

TangentShape propagate_tangent(const Graph& g, NodeId id, std::span<const TangentShape* const> in) {
  const Node& n = g.node(id);
  TangentShape t;
  bool any = false;
  for (std::size_t i = 0; i < n.inputs.size() && i < in.size(); ++i) any = any || tangent_varies(in[i]);
  const OpRule& rule = op_rule(n.op);
  if (!any || !rule.grad || n.dtype != DType::f32 || n.attrs.no_grad) return t;
  std::vector<const TangentShape*> at(n.inputs.size(), nullptr);  // one per input, null past `in`
  for (std::size_t i = 0; i < at.size() && i < in.size(); ++i) at[i] = in[i];
  const std::size_t r = n.shape.size();
  TangentShape out;
  out.zero = false;
  out.constant.assign(r, 0);
  if (rule.tangent) rule.tangent(g, n, at, out);
  if (out.cancelled) {
    t.cancelled = true;
    return t;
  }
  out.constant.resize(r, 0);
  for (std::size_t d = 0; d < r; ++d) out.constant[d] = out.constant[d] || n.shape[d] == 1;
  return out;
}

}  // namespace gg
