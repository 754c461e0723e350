// The builders: thin functions that fill in attributes and let Graph::add run the shape
// rule. Every node gets the graph's current scope as its name (leaves: scope + name).
#include "ops/ir/build.h"

#include <fmt/format.h>

#include <algorithm>

namespace gg::op {
namespace {
NodeId make(Graph& g, OpKind k, std::vector<NodeId> in, Attrs at, Loc loc) {
  return g.add(k, std::move(in), std::move(at), g.scope(), loc);
}
}  // namespace

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, int* bad_axis) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    std::int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      if (bad_axis) *bad_axis = -int(i) - 1;
      return std::nullopt;
    }
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

NodeId input(Graph& g, const std::string& name, Shape shape, DType dtype, Loc loc) {
  Attrs at;
  at.dims = std::move(shape);
  at.dtype = dtype;
  return g.add(OpKind::input, {}, at, g.scoped(name), loc);
}

namespace {
// A parameter name with one step's part taken out, when the step pattern fits it: for
// ("", "step.#"), "step.4.gru.hh.weight" is "gru.hh.weight" with the part "step.4"; for
// ("enc", "step.#"), "enc.step.4.w" is "enc.w". Empty `shared` when the pattern does not fit.
struct StepPart {
  std::string shared, part;
};
StepPart without_step(const std::string& name, const Graph::StepPattern& p) {
  std::string rest = name;
  if (!p.param_scope.empty()) {
    if (name.rfind(p.param_scope + ".", 0) != 0) return {};
    rest = name.substr(p.param_scope.size() + 1);
  }
  const auto parts = std::count(p.key.begin(), p.key.end(), '.') + 1;
  std::size_t end = 0;
  for (std::ptrdiff_t k = 0; k < parts; ++k) {
    end = rest.find('.', k ? end + 1 : 0);
    if (end == std::string::npos) return {};  // the step part must be followed by a name
  }
  if (step_key(rest.substr(0, end)) != p.key) return {};
  const std::string tail = rest.substr(end + 1);
  return {p.param_scope.empty() ? tail : p.param_scope + "." + tail, rest.substr(0, end)};
}

// Refuses a per-step copy of a weight the steps share: `full`, declared under a plain scope
// named like a step, when the steps declared it without the step's part (or the other way
// round: `full`, declared in a step scope, when a plain-scoped copy of it exists).
void check_step_sharing(const Graph& g, const std::string& full, Loc loc) {
  const std::string at = site_string(g.user_loc().value_or(loc));
  auto site_of = [&](const std::string& name) { return site_string(g.node(g.find(name, OpKind::param)).loc); };
  for (const Graph::StepPattern& p : g.step_patterns()) {
    const StepPart copy = without_step(full, p);
    auto it = g.step_params().find(copy.shared);
    if (copy.shared.empty() || it == g.step_params().end()) continue;
    throw GraphError(fmt::format(
        "param at {} ('{}'): a copy of '{}', the weight the steps share (declared in step scope '{}' at {}): "
        "the plain scope '{}' gives its nodes weights of their own. Open the step with StepScope(g, \"{}\") to "
        "share '{}', or give this weight another name",
        at, full, copy.shared, it->second, site_of(copy.shared), copy.part, copy.part, copy.shared));
  }
  if (g.step_scope().empty()) return;
  for (const Node& n : g.nodes()) {
    if (!n.is_param() || g.step_params().count(n.name)) continue;
    for (const Graph::StepPattern& p : g.step_patterns()) {
      const StepPart copy = without_step(n.name, p);
      if (copy.shared != full) continue;
      throw GraphError(fmt::format(
          "param at {} ('{}'): declared in step scope '{}' to be shared by the steps, but '{}' (at {}) is a copy "
          "of it, declared under the plain scope '{}'. Open every step with StepScope",
          at, full, g.step_scope(), n.name, site_string(n.loc), copy.part));
    }
  }
}
}  // namespace

NodeId param(Graph& g, const std::string& name, Shape shape, Init init, Loc loc) {
  // A name declared again with the same shape is the same parameter (e.g. tied weights, or
  // a weight every step of a loop declares in its StepScope); with another shape, the param
  // rule refuses it. Parameters are named without the step scopes (Graph::param_scoped).
  const std::string full = g.param_scoped(name);
  NodeId prev = g.find(full, OpKind::param);
  if (prev < 0 || g.node(prev).shape != shape) {
    if (prev < 0) check_step_sharing(g, full, loc);
    Attrs at;
    at.dims = std::move(shape);
    at.init = init;
    prev = g.add(OpKind::param, {}, at, full, loc);
  }
  if (!g.step_scope().empty()) g.note_step_param(full);
  return prev;
}

NodeId constant(Graph& g, std::vector<float> values, Shape shape, DType dtype, Loc loc) {
  Attrs at;
  at.dims = std::move(shape);
  at.data = std::make_shared<const std::vector<float>>(std::move(values));
  at.dtype = dtype;
  return make(g, OpKind::constant, {}, at, loc);
}

NodeId scalar(Graph& g, float value, Loc loc) { return constant(g, {value}, {}, DType::f32, loc); }

NodeId random(Graph& g, Shape shape, Loc loc) {
  Attrs at;
  at.dims = std::move(shape);
  return make(g, OpKind::random, {}, at, loc);
}

#define GG_BUILD_leaf(name)
#define GG_BUILD_other(name)
#define GG_BUILD_binary(name) \
  NodeId name(Graph& g, NodeId a, NodeId b, Loc loc) { return make(g, OpKind::name, {a, b}, {}, loc); }
#define GG_BUILD_unary(name) \
  NodeId name(Graph& g, NodeId x, Loc loc) { return make(g, OpKind::name, {x}, {}, loc); }
#define OP(name, arity, family) GG_BUILD_##family(name)
#include "ops/ir/op_list.def"
#undef OP
#undef GG_BUILD_leaf
#undef GG_BUILD_other
#undef GG_BUILD_unary
#undef GG_BUILD_binary

NodeId compare(Graph& g, NodeId a, NodeId b, Cmp cmp, Loc loc) {
  Attrs at;
  at.cmp = cmp;
  return make(g, OpKind::compare, {a, b}, at, loc);
}

NodeId where(Graph& g, NodeId cond, NodeId a, NodeId b, Loc loc) {
  return make(g, OpKind::where, {cond, a, b}, {}, loc);
}

NodeId sum(Graph& g, NodeId x, std::int64_t axis, bool keepdim, Loc loc) {
  Attrs at;
  at.axis = axis;
  at.keepdim = keepdim;
  return make(g, OpKind::sum, {x}, at, loc);
}

NodeId max(Graph& g, NodeId x, std::int64_t axis, bool keepdim, Loc loc) {
  Attrs at;
  at.axis = axis;
  at.keepdim = keepdim;
  return make(g, OpKind::max, {x}, at, loc);
}

NodeId argmax(Graph& g, NodeId x, std::int64_t axis, bool keepdim, Loc loc) {
  Attrs at;
  at.axis = axis;
  at.keepdim = keepdim;
  return make(g, OpKind::argmax, {x}, at, loc);
}

NodeId matmul(Graph& g, NodeId a, NodeId b, bool trans_a, bool trans_b, Loc loc) {
  Attrs at;
  at.trans_a = trans_a;
  at.trans_b = trans_b;
  return make(g, OpKind::matmul, {a, b}, at, loc);
}

NodeId attention(Graph& g, NodeId q, NodeId k, NodeId v, NodeId mask, float scale, Loc loc) {
  Attrs at;
  at.scale = scale;
  std::vector<NodeId> in{q, k, v};
  if (mask >= 0) in.push_back(mask);
  return make(g, OpKind::attention, std::move(in), at, loc);
}

NodeId attention_back(Graph& g, NodeId q, NodeId k, NodeId v, NodeId mask, NodeId fwd, NodeId gout, float scale,
                      Loc loc) {
  Attrs at;
  at.scale = scale;
  std::vector<NodeId> in{q, k, v};
  if (mask >= 0) in.push_back(mask);
  in.push_back(fwd);
  in.push_back(gout);
  return make(g, OpKind::attention_back, std::move(in), at, loc);
}

NodeId stop_gradient(Graph& g, NodeId x, Loc loc) {
  if (x < 0 || x >= g.size())
    throw GraphError(fmt::format("stop_gradient at {}: %{} is not a node of this graph (it has {} nodes)",
                                 site_string(g.user_loc().value_or(loc)), x, g.size()));
  Attrs at;
  at.dims = g.node(x).shape;
  at.no_grad = true;
  return make(g, OpKind::reshape, {x}, at, loc);
}

NodeId reshape(Graph& g, NodeId x, Shape shape, Loc loc) {
  if (g.node(x).shape == shape) return x;
  Attrs at;
  at.dims = std::move(shape);
  return make(g, OpKind::reshape, {x}, at, loc);
}

NodeId permute(Graph& g, NodeId x, Shape perm, Loc loc) {
  Attrs at;
  at.dims = std::move(perm);
  return make(g, OpKind::permute, {x}, at, loc);
}

NodeId expand(Graph& g, NodeId x, Shape shape, Loc loc) {
  if (g.node(x).shape == shape) return x;
  Attrs at;
  at.dims = std::move(shape);
  return make(g, OpKind::expand, {x}, at, loc);
}

NodeId slice(Graph& g, NodeId x, std::int64_t axis, std::int64_t begin, std::int64_t end, Loc loc) {
  Attrs at;
  at.axis = axis;
  at.begin = begin;
  at.end = end;
  return make(g, OpKind::slice, {x}, at, loc);
}

NodeId concat(Graph& g, std::vector<NodeId> xs, std::int64_t axis, Loc loc) {
  Attrs at;
  at.axis = axis;
  return make(g, OpKind::concat, std::move(xs), at, loc);
}

NodeId gather(Graph& g, NodeId x, NodeId index, std::int64_t axis, Loc loc) {
  Attrs at;
  at.axis = axis;
  return make(g, OpKind::gather, {x, index}, at, loc);
}

NodeId scatter_add(Graph& g, NodeId src, NodeId index, std::int64_t axis, std::int64_t size, Loc loc) {
  Attrs at;
  at.axis = axis;
  at.end = size;
  return make(g, OpKind::scatter_add, {src, index}, at, loc);
}

NodeId sum_to(Graph& g, NodeId x, const Shape& shape, Loc loc) {
  if (x < 0 || x >= g.size())
    throw GraphError(fmt::format("sum_to at {}: %{} is not a node of this graph", site_string(g.user_loc().value_or(loc)), x));
  Shape xs = g.node(x).shape;
  if (xs == shape) return x;
  if (auto b = broadcast_shapes(shape, xs); !b || *b != xs)
    throw GraphError(fmt::format("sum_to at {}: {} does not broadcast to {} ('{}'), so it cannot be summed down to it",
                                 site_string(g.user_loc().value_or(loc)), to_string(shape), to_string(xs),
                                 g.node(x).name));
  // Leading axes that `shape` lacks: sum them away, in one reduction over their product
  // (a bias gradient (B, T, D) -> (D) is one pass down B*T rows, not one per axis).
  if (const std::size_t lead = xs.size() - shape.size(); lead > 0) {
    if (lead > 1) {
      Shape flat{1};
      for (std::size_t d = 0; d < lead; ++d) flat[0] *= xs[d];
      flat.insert(flat.end(), xs.begin() + std::ptrdiff_t(lead), xs.end());
      x = reshape(g, x, flat, loc);
    }
    x = sum(g, x, 0, false, loc);
    xs.erase(xs.begin(), xs.begin() + std::ptrdiff_t(lead));
  }
  // Axes where `shape` has 1 but x does not: sum with keepdim.
  for (std::size_t d = 0; d < xs.size(); ++d)
    if (shape[d] == 1 && xs[d] != 1) x = sum(g, x, std::int64_t(d), true, loc);
  return x;
}

}  // namespace gg::op
