// The structure of a node's tangent -- its derivative along one parameter direction --
// without computing it: whether it is zero, and along which axes it is the same at every
// index. Each primitive's tangent rule (its record's, ops/ir/op_rule.h) maps its inputs'
// tangent structures to its output's; this is what lets the gradient statistics
// (autodiff/grad_stats.h) tell a gradient that is zero by construction (no path, a path
// only through step functions, or a shift that a softmax removes) from one that happens
// to be small. Conservative: "not constant" is always a safe answer.
#pragma once

#include <span>
#include <vector>

#include "graph.h"
#include "op_rule.h"

namespace gg {

struct TangentShape {
  bool zero = true;             // the node does not vary with the parameter through differentiable ops
  std::vector<char> constant;   // per output axis (when !zero): the tangent is the same at every index
  bool cancelled = false;       // zero because a shift constant along an axis is removed here (x - max(x))
};

// The tangent structure of node `id` from its inputs' (in[i] for input i; nullptr or a
// zero tangent for an input that does not vary). The node is zero when no input varies,
// its op has no gradient (compare, argmax) or it is marked no_grad (op::stop_gradient: as
// JAX's jvp of stop_gradient, its tangent is zero). The one cancellation rule:
//   sub(X, M) with M = max(X, axis k, keepdim) and X's tangent constant along k is zero,
//   because max(X + c) = max(X) + c for any c constant along k: the max trick at the
// start of softmax and log_softmax, which is why a per-row constant added to attention
// scores (the key bias: q . b is the same for every key) has no effect on the loss.
//   M may also be stop_gradient(max(X, k, keepdim)), as softmax and log_softmax build it:
// the value X - M still does not vary; the reverse pass then leaves the shift in place
// and the normalization that follows (e / sum(e), or - log(sum(exp))) removes it, so the
// loss's derivative is zero either way. (A bare X - stop_gradient(max(X)) with no
// normalization after it would be called cancelled too: the rule assumes that idiom.)
// A `where` whose other branch is a constant -inf (a mask fill) keeps its branch's
// constant axes, since -inf + c = -inf.
TangentShape propagate_tangent(const Graph& g, NodeId id, std::span<const TangentShape* const> in);

// The tangent structure of a parameter along itself: non-zero, constant along no axis
// (except axes of size 1).
TangentShape seed_tangent(const Graph& g, NodeId param);

// ---- helpers for the primitives' tangent rules --------------------------------------

// Whether t is a tangent that varies (not null, not zero).
bool tangent_varies(const TangentShape* t);
// Per output axis of n: whether input i holds the same value at every index of it
// (missing or size 1 there: broadcast).
std::vector<char> broadcast_axes(const Graph& g, const Node& n, std::size_t i);
// Input i's tangent constancy aligned to n's axes by broadcasting (all 1 if it does not vary).
std::vector<char> aligned_tangent(const Graph& g, const Node& n, std::size_t i, const TangentShape* t);
// a[d] = a[d] && b[d]
void and_into(std::vector<char>& a, const std::vector<char>& b);

// d out = sum_i d in_i (add, neg): constant along an axis when every input's tangent is.
void tangent_additive(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out);
// sub: additive, with the cancellation rule above.
void tangent_sub(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out);
// d out = sum_i f_i(inputs) d in_i: constant along an axis when every varying input's
// tangent is and the factors (which read every input, conservatively; bit i of `linear`:
// the factor of input i does not read input i, as mul's and div's numerator's) are.
void tangent_pointwise(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out,
                       unsigned linear);
template <unsigned Linear>
void tangent_pointwise(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
  tangent_pointwise(g, n, in, out, Linear);
}

}  // namespace gg
