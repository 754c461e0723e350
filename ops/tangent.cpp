// Tangent-structure rules, one case per primitive family: element-wise ops keep an axis
// constant when the other factors do not vary along it, reductions and movements map axes,
// matmul keeps the row (column) axis of the operand that varies, and sub(X, max(X))
// cancels a shift along the reduced axis.
#include "ops/tangent.h"

#include <cmath>

#include "ops/op_rule.h"

namespace gg {
namespace {

bool varies(const TangentShape* t) { return t && !t->zero; }

// Whether input `i` of n holds the same value at every index of each output axis
// (missing or size 1 there: broadcast).
std::vector<char> broadcast_axes(const Graph& g, const Node& n, std::size_t i) {
  const Shape& s = g.node(n.inputs[i]).shape;
  const std::size_t r = n.shape.size(), off = r - s.size();
  std::vector<char> c(r, 1);
  for (std::size_t d = 0; d < s.size(); ++d) c[off + d] = s[d] == 1;
  return c;
}

// Input i's tangent constancy, aligned to the output's axes by broadcasting.
std::vector<char> aligned(const Graph& g, const Node& n, std::size_t i, const TangentShape* t) {
  std::vector<char> c = broadcast_axes(g, n, i);
  if (!varies(t)) return std::vector<char>(n.shape.size(), 1);
  const std::size_t off = n.shape.size() - t->constant.size();
  for (std::size_t d = 0; d < t->constant.size(); ++d) c[off + d] = c[off + d] || t->constant[d];
  return c;
}

void and_into(std::vector<char>& a, const std::vector<char>& b) {
  for (std::size_t d = 0; d < a.size(); ++d) a[d] = a[d] && b[d];
}

// A constant node all of whose values are -inf (a mask fill).
bool minus_inf_constant(const Node& n) {
  if (n.op != OpKind::constant || !n.attrs.data || n.attrs.data->empty()) return false;
  for (float v : *n.attrs.data)
    if (!(std::isinf(v) && v < 0)) return false;
  return true;
}

// In-axis of each out-axis for a reshape that keeps it intact (same size, same count of
// elements before it), or -1.
std::vector<int> reshape_axis_map(const Shape& in, const Shape& out) {
  std::vector<int> m(out.size(), -1);
  std::int64_t pin = 1;
  std::vector<std::int64_t> before_in(in.size());
  for (std::size_t d = 0; d < in.size(); ++d) {
    before_in[d] = pin;
    pin *= in[d];
  }
  std::int64_t pout = 1;
  for (std::size_t d = 0; d < out.size(); ++d) {
    for (std::size_t e = 0; e < in.size(); ++e)
      if (before_in[e] == pout && in[e] == out[d]) m[d] = int(e);
    pout *= out[d];
  }
  return m;
}

}  // namespace

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
  for (std::size_t i = 0; i < n.inputs.size() && i < in.size(); ++i) any = any || varies(in[i]);
  if (!any || !op_rule(n.op).grad || n.dtype != DType::f32 || n.attrs.no_grad) return t;
  auto at = [&](std::size_t i) { return i < in.size() ? in[i] : nullptr; };
  const std::size_t r = n.shape.size();
  std::vector<char> c(r, 0);

  switch (n.op) {
    case OpKind::sub: {
      // The cancellation: X - max(X, k, keepdim) with X's tangent constant along k; the max
      // may be detached (op::stop_gradient of it, as softmax and log_softmax build it).
      const Node* mp = &g.node(n.inputs[1]);
      if (mp->attrs.no_grad && mp->op == OpKind::reshape && mp->shape == g.node(mp->inputs[0]).shape)
        mp = &g.node(mp->inputs[0]);
      const Node& m = *mp;
      if (m.op == OpKind::max && m.attrs.keepdim && m.inputs[0] == n.inputs[0] && varies(at(0)) &&
          at(0)->constant[std::size_t(m.attrs.axis)]) {
        t.cancelled = true;
        return t;
      }
      [[fallthrough]];
    }
    case OpKind::add:
    case OpKind::neg: {
      c.assign(r, 1);
      for (std::size_t i = 0; i < n.inputs.size(); ++i) and_into(c, aligned(g, n, i, at(i)));
      break;
    }
    case OpKind::mul:
    case OpKind::div:
    case OpKind::maximum:
    case OpKind::exp:
    case OpKind::log:
    case OpKind::sqrt:
    case OpKind::tanh:
    case OpKind::erf: {
      // d out = sum_i f_i(inputs) d in_i: constant along an axis when every varying
      // input's tangent is, and the factors (which read every input, conservatively) are.
      c.assign(r, 1);
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        if (!varies(at(i))) continue;
        and_into(c, aligned(g, n, i, at(i)));
        const bool linear_in_i = n.op == OpKind::mul || (n.op == OpKind::div && i == 0);
        for (std::size_t j = 0; j < n.inputs.size(); ++j)
          if (j != i || !linear_in_i) and_into(c, broadcast_axes(g, n, j));
      }
      break;
    }
    case OpKind::where: {
      c.assign(r, 1);
      for (std::size_t i = 1; i < 3; ++i) {
        if (!varies(at(i))) continue;
        and_into(c, aligned(g, n, i, at(i)));
        if (!minus_inf_constant(g.node(n.inputs[3 - i]))) and_into(c, broadcast_axes(g, n, 0));
      }
      break;
    }
    case OpKind::sum:
    case OpKind::max: {
      const std::vector<char>& x = at(0)->constant;
      const std::size_t k = std::size_t(n.attrs.axis);
      for (std::size_t d = 0, e = 0; d < r; ++d, ++e) {
        if (e == k && !n.attrs.keepdim) ++e;
        c[d] = x[e];
      }
      break;
    }
    case OpKind::reshape: {
      std::vector<int> m = reshape_axis_map(g.node(n.inputs[0]).shape, n.shape);
      for (std::size_t d = 0; d < r; ++d) c[d] = m[d] >= 0 && at(0)->constant[std::size_t(m[d])];
      break;
    }
    case OpKind::permute:
      for (std::size_t d = 0; d < r; ++d) c[d] = at(0)->constant[std::size_t(n.attrs.dims[d])];
      break;
    case OpKind::expand:
    case OpKind::slice:
      c = aligned(g, n, 0, at(0));
      break;
    case OpKind::concat:
      c.assign(r, 1);
      for (std::size_t i = 0; i < n.inputs.size(); ++i) and_into(c, aligned(g, n, i, at(i)));
      c[std::size_t(n.attrs.axis)] = 0;
      break;
    case OpKind::matmul: {
      // out (batch..., M, N) = op(A) op(B). With only B varying, d out = op(A) d op(B) is
      // constant along N when d op(B) is; along a batch axis when it is and A is broadcast
      // there. Symmetrically for A. Both varying: constant along nothing (conservative).
      if (varies(at(0)) && varies(at(1))) break;
      const std::size_t v = varies(at(0)) ? 0 : 1, o = 1 - v;
      const Shape& sv = g.node(n.inputs[v]).shape;
      const Shape& so = g.node(n.inputs[o]).shape;
      const std::vector<char>& cv = at(v)->constant;
      const bool tv = v == 0 ? n.attrs.trans_a : n.attrs.trans_b;
      // The varying operand's axis that becomes out's M (for A) or N (for B).
      const std::size_t kept = v == 0 ? (tv ? sv.size() - 1 : sv.size() - 2) : (tv ? sv.size() - 2 : sv.size() - 1);
      c[v == 0 ? r - 2 : r - 1] = cv[kept];
      const std::size_t bv = sv.size() - 2, bo = so.size() - 2;  // batch ranks
      for (std::size_t d = 0; d + 2 < r; ++d) {
        const std::size_t back = r - 2 - d;  // batch axes counted from the right
        const bool v_const = back > bv || sv[bv - back] == 1 || cv[bv - back];
        const bool o_bcast = back > bo || so[bo - back] == 1;
        c[d] = v_const && o_bcast;
      }
      break;
    }
    case OpKind::gather: {
      // out = x.shape[:k] + index.shape + x.shape[k+1:]; the index has no tangent.
      const std::vector<char>& x = at(0)->constant;
      const std::size_t k = std::size_t(n.attrs.axis), ri = g.node(n.inputs[1]).shape.size();
      for (std::size_t d = 0; d < r; ++d) c[d] = d < k ? x[d] : d < k + ri ? x[k] : x[d - ri + 1];
      break;
    }
    default:  // scatter_add and anything new: constant along nothing
      break;
  }
  for (std::size_t d = 0; d < r; ++d) c[d] = c[d] || n.shape[d] == 1;
  t.zero = false;
  t.constant = std::move(c);
  return t;
}

}  // namespace gg
