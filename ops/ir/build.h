// Builders: one function per primitive that appends a node (running its shape rule) and
// returns its id. The DSL wraps these in Expr handles; gradient rules use them directly.
// Each takes the builder's call site; a UserSite open on the graph takes precedence.
#pragma once

#include <source_location>
#include <string>
#include <vector>

#include "graph.h"

namespace gg::op {

using Loc = std::source_location;

NodeId input(Graph& g, const std::string& name, Shape shape, DType dtype = DType::f32, Loc loc = Loc::current());
NodeId param(Graph& g, const std::string& name, Shape shape, Init init, Loc loc = Loc::current());
// `values` has numel(shape) entries (i32 constants are stored as exact floats).
NodeId constant(Graph& g, std::vector<float> values, Shape shape, DType dtype = DType::f32, Loc loc = Loc::current());
NodeId scalar(Graph& g, float value, Loc loc = Loc::current());
NodeId random(Graph& g, Shape shape, Loc loc = Loc::current());

// The unary and binary element-wise primitives of op_list.def, one builder each:
// NodeId exp(Graph&, NodeId x, Loc), NodeId add(Graph&, NodeId a, NodeId b, Loc), ...
#define GG_BUILDER_leaf(name)
#define GG_BUILDER_other(name)
#define GG_BUILDER_unary(name) NodeId name(Graph& g, NodeId x, Loc loc = Loc::current());
#define GG_BUILDER_binary(name) NodeId name(Graph& g, NodeId a, NodeId b, Loc loc = Loc::current());
#define OP(name, arity, family) GG_BUILDER_##family(name)
#include "op_list.def"
#undef OP
#undef GG_BUILDER_leaf
#undef GG_BUILDER_other
#undef GG_BUILDER_unary
#undef GG_BUILDER_binary
NodeId compare(Graph& g, NodeId a, NodeId b, Cmp cmp, Loc loc = Loc::current());
NodeId where(Graph& g, NodeId cond, NodeId a, NodeId b, Loc loc = Loc::current());

// Reductions over one axis (negative counts from the end).
NodeId sum(Graph& g, NodeId x, std::int64_t axis, bool keepdim = false, Loc loc = Loc::current());
NodeId max(Graph& g, NodeId x, std::int64_t axis, bool keepdim = false, Loc loc = Loc::current());
// i32 index of the largest entry along `axis`: the first on ties, a NaN counts as largest.
NodeId argmax(Graph& g, NodeId x, std::int64_t axis, bool keepdim = false, Loc loc = Loc::current());

// a: (..., M, K) (or (..., K, M) with trans_a), b: (..., K, N) (or (..., N, K) with
// trans_b); batch dims broadcast; out: (batch..., M, N).
NodeId matmul(Graph& g, NodeId a, NodeId b, bool trans_a = false, bool trans_b = false, Loc loc = Loc::current());

// softmax(scale q k^T, masked) @ v by blocks of keys (ops/primitives/attention.cpp), the
// weights never stored. q: (..., Tq, hs), k: (..., Tk, hs), v: (..., Tk, hv), the batch dims
// equal; mask (-1: none): f32 of q's rank, 0 where a key is masked, each dim 1 or the
// scores' (..., Tq, Tk). out: (..., Tq, hv + 1), each row the attention's output then the
// log-sum-exp of its scaled, masked scores (what the gradient reads back).
NodeId attention(Graph& g, NodeId q, NodeId k, NodeId v, NodeId mask, float scale, Loc loc = Loc::current());
// attention's gradient: fwd is attention's node, gout d(loss)/d(fwd) of its shape.
// out: (..., Tq hs + Tk hs + Tk hv), per batch index dq (Tq, hs), dk (Tk, hs), dv (Tk, hv).
NodeId attention_back(Graph& g, NodeId q, NodeId k, NodeId v, NodeId mask, NodeId fwd, NodeId gout, float scale,
                      Loc loc = Loc::current());

// One dim of `shape` may be -1 (inferred).
NodeId reshape(Graph& g, NodeId x, Shape shape, Loc loc = Loc::current());
NodeId permute(Graph& g, NodeId x, Shape perm, Loc loc = Loc::current());
NodeId expand(Graph& g, NodeId x, Shape shape, Loc loc = Loc::current());
NodeId slice(Graph& g, NodeId x, std::int64_t axis, std::int64_t begin, std::int64_t end, Loc loc = Loc::current());
NodeId concat(Graph& g, std::vector<NodeId> xs, std::int64_t axis, Loc loc = Loc::current());
// index: i32; out = x.shape[:axis] + index.shape + x.shape[axis+1:].
NodeId gather(Graph& g, NodeId x, NodeId index, std::int64_t axis = 0, Loc loc = Loc::current());
// The adjoint of gather: src has gather's output shape; out has `size` along axis.
NodeId scatter_add(Graph& g, NodeId src, NodeId index, std::int64_t axis, std::int64_t size, Loc loc = Loc::current());

// The value of x, through which no gradient flows (PyTorch's x.detach(), JAX's
// lax.stop_gradient): an identity reshape marked Attrs::no_grad, so a view that copies
// nothing at run time. grad() builds no gradient nodes behind it; grad with respect to
// the returned node itself still works.
NodeId stop_gradient(Graph& g, NodeId x, Loc loc = Loc::current());

// Sums x down to `shape` (which broadcasts to x's shape): undoes broadcasting.
NodeId sum_to(Graph& g, NodeId x, const Shape& shape, Loc loc = Loc::current());

// Numpy broadcast of two shapes, or nullopt with the first disagreeing axis in *bad_axis.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, int* bad_axis = nullptr);

}  // namespace gg::op
