// Expr operators and primitive wrappers: each opens a UserSite with the caller's line
// and forwards to the ops builder.
#include "dsl/expr.h"

#include <fmt/format.h>

namespace gg::dsl {

const Node& Expr::node() const {
  if (!g) throw GraphError("empty Expr: this handle refers to no node (a default-constructed Expr?)");
  if (id < 0 || id >= g->size())
    throw GraphError(fmt::format("Expr %{} is not a node of its graph (it has {} nodes)", id, g->size()));
  return g->node(id);
}

namespace {
std::string describe(const Expr& e) {
  const Node& n = e.g->node(e.id);
  return n.name.empty() ? fmt::format("%{} {}", e.id, to_string(n.shape))
                        : fmt::format("'{}' (%{} {})", n.name, e.id, to_string(n.shape));
}
}  // namespace

Graph& graph_of(const char* what, Loc loc, std::initializer_list<Expr> xs) {
  const Expr* first = nullptr;
  int i = 0;
  for (const Expr& e : xs) {
    ++i;
    if (e.empty())
      throw GraphError(fmt::format("{} at {}: operand {} is an empty Expr (default-constructed; it refers to no node)",
                                   what, site_string(loc), i));
    (void)e.node();  // id in range
    if (!first) first = &e;
    else if (e.g != first->g)
      throw GraphError(fmt::format("{} at {}: {} and {} belong to different graphs", what,
                                   site_string(first->g->user_loc().value_or(loc)), describe(*first), describe(e)));
  }
  if (!first) throw GraphError(fmt::format("{} at {}: no operands", what, site_string(loc)));
  return *first->g;
}

std::vector<NodeId> node_ids(const Graph& g, const std::vector<Expr>& xs, Loc loc) {
  std::vector<NodeId> ids;
  for (const Expr& e : xs) {
    graph_of("node_ids", loc, {e});
    if (e.g != &g)
      throw GraphError(fmt::format("node_ids at {}: {} belongs to another graph than the executor's", site_string(loc),
                                   describe(e)));
    ids.push_back(e.id);
  }
  return ids;
}

std::int64_t Expr::dim(int axis) const {
  const Shape& s = shape();
  int a = axis < 0 ? axis + int(s.size()) : axis;
  if (a < 0 || a >= int(s.size()))
    g->fail(node(), fmt::format("dim({}) out of range for shape {}", axis, to_string(s)));
  return s[std::size_t(a)];
}

void fail_at_call(const Graph& g, const char* what, Loc loc, const std::string& msg) {
  const std::string who = g.scope().empty() ? "" : fmt::format(" ('{}')", g.scope());
  throw GraphError(fmt::format("{} at {}{}: {}", what, site_string(g.user_loc().value_or(loc)), who, msg));
}

namespace {
NodeId as_node(Graph& g, const Operand& o) { return o.is_scalar ? op::scalar(g, o.value, o.loc) : o.e.id; }

template <class F>
Expr binary(const char* what, Expr a, const Operand& b, F f) {
  Graph& g = b.is_scalar ? graph_of(what, b.loc, {a}) : graph_of(what, b.loc, {a, b.e});
  UserSite site(g, b.loc);
  return {&g, f(g, a.id, as_node(g, b), b.loc)};
}
template <class F>
Expr binary_left_scalar(const char* what, float a, const Operand& b, F f) {
  Graph& g = graph_of(what, b.loc, {b.e});
  UserSite site(g, b.loc);
  return {&g, f(g, op::scalar(g, a, b.loc), b.e.id, b.loc)};
}
}  // namespace

Expr operator+(Expr a, Operand b) { return binary("operator+", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::add(g, x, y, l); }); }
Expr operator-(Expr a, Operand b) { return binary("operator-", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::sub(g, x, y, l); }); }
Expr operator*(Expr a, Operand b) { return binary("operator*", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::mul(g, x, y, l); }); }
Expr operator/(Expr a, Operand b) { return binary("operator/", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::div(g, x, y, l); }); }
Expr operator+(float a, Operand b) { return binary_left_scalar("operator+", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::add(g, x, y, l); }); }
Expr operator-(float a, Operand b) { return binary_left_scalar("operator-", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::sub(g, x, y, l); }); }
Expr operator*(float a, Operand b) { return binary_left_scalar("operator*", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::mul(g, x, y, l); }); }
Expr operator/(float a, Operand b) { return binary_left_scalar("operator/", a, b, [](Graph& g, NodeId x, NodeId y, Loc l) { return op::div(g, x, y, l); }); }
Expr operator-(Operand a) {
  if (a.is_scalar) throw GraphError(fmt::format("operator- at {}: needs an Expr", site_string(a.loc)));
  UserSite site(graph_of("operator-", a.loc, {a.e}), a.loc);
  return {a.e.g, op::neg(*a.e.g, a.e.id, a.loc)};
}

Expr input(Graph& g, const std::string& name, Shape shape, DType dtype, Loc loc) {
  UserSite site(g, loc);
  return {&g, op::input(g, name, std::move(shape), dtype, loc)};
}
Expr param(Graph& g, const std::string& name, Shape shape, Init init, Loc loc) {
  UserSite site(g, loc);
  return {&g, op::param(g, name, std::move(shape), init, loc)};
}
Expr constant(Graph& g, std::vector<float> values, Shape shape, DType dtype, Loc loc) {
  UserSite site(g, loc);
  return {&g, op::constant(g, std::move(values), std::move(shape), dtype, loc)};
}
Expr scalar(Graph& g, float v, Loc loc) {
  UserSite site(g, loc);
  return {&g, op::scalar(g, v, loc)};
}
Init normal_init(float std, float mean) { return {Init::normal, mean, std}; }
Init uniform_init(float lo, float hi) { return {Init::uniform, lo, hi}; }

#define GG_DSL_leaf(name)
#define GG_DSL_other(name)
#define GG_DSL_unary(fn)                         \
  Expr fn(Expr x, Loc loc) {                     \
    UserSite site(graph_of(#fn, loc, {x}), loc); \
    return {x.g, op::fn(*x.g, x.id, loc)};       \
  }
#define GG_DSL_binary(fn)                           \
  Expr fn(Expr a, Expr b, Loc loc) {                \
    UserSite site(graph_of(#fn, loc, {a, b}), loc); \
    return {a.g, op::fn(*a.g, a.id, b.id, loc)};    \
  }
#define OP(name, arity, family) GG_DSL_##family(name)
#include "../ops/ir/op_list.def"
#undef OP
#undef GG_DSL_leaf
#undef GG_DSL_other
#undef GG_DSL_unary
#undef GG_DSL_binary

Expr matmul(Expr a, Expr b, bool ta, bool tb, Loc loc) {
  UserSite site(graph_of("matmul", loc, {a, b}), loc);
  return {a.g, op::matmul(*a.g, a.id, b.id, ta, tb, loc)};
}
Expr compare(Expr a, Expr b, Cmp cmp, Loc loc) {
  UserSite site(graph_of("compare", loc, {a, b}), loc);
  return {a.g, op::compare(*a.g, a.id, b.id, cmp, loc)};
}
Expr where(Expr c, Expr a, Expr b, Loc loc) {
  UserSite site(graph_of("where", loc, {c, a, b}), loc);
  return {a.g, op::where(*a.g, c.id, a.id, b.id, loc)};
}
Expr sum(Expr x, std::int64_t axis, bool keepdim, Loc loc) {
  UserSite site(graph_of("sum", loc, {x}), loc);
  return {x.g, op::sum(*x.g, x.id, axis, keepdim, loc)};
}
Expr max(Expr x, std::int64_t axis, bool keepdim, Loc loc) {
  UserSite site(graph_of("max", loc, {x}), loc);
  return {x.g, op::max(*x.g, x.id, axis, keepdim, loc)};
}
Expr argmax(Expr x, std::int64_t axis, bool keepdim, Loc loc) {
  UserSite site(*x.g, loc);
  return {x.g, op::argmax(*x.g, x.id, axis, keepdim, loc)};
}
Expr mean(Expr x, std::int64_t axis, bool keepdim, Loc loc) {
  UserSite site(graph_of("mean", loc, {x}), loc);
  Expr s = sum(x, axis, keepdim, loc);
  return s * (1.f / float(x.dim(int(axis))));
}
Expr sum_all(Expr x, Loc loc) {
  UserSite site(graph_of("sum_all", loc, {x}), loc);
  if (x.rank() == 0) return x;
  return sum(reshape(x, {-1}, loc), 0, false, loc);
}
Expr mean_all(Expr x, Loc loc) {
  UserSite site(graph_of("mean_all", loc, {x}), loc);
  return sum_all(x, loc) * (1.f / float(numel(x.shape())));
}
Expr reshape(Expr x, Shape shape, Loc loc) {
  UserSite site(graph_of("reshape", loc, {x}), loc);
  return {x.g, op::reshape(*x.g, x.id, std::move(shape), loc)};
}
Expr stop_gradient(Expr x, Loc loc) {
  UserSite site(graph_of("stop_gradient", loc, {x}), loc);
  return {x.g, op::stop_gradient(*x.g, x.id, loc)};
}
Expr permute(Expr x, Shape perm, Loc loc) {
  UserSite site(graph_of("permute", loc, {x}), loc);
  return {x.g, op::permute(*x.g, x.id, std::move(perm), loc)};
}
Expr transpose(Expr x, int a, int b, Loc loc) {
  UserSite site(graph_of("transpose", loc, {x}), loc);
  const int r = x.rank();
  if (a < 0) a += r;
  if (b < 0) b += r;
  Shape perm(std::size_t(std::max(r, 0)));
  for (int i = 0; i < r; ++i) perm[std::size_t(i)] = i;
  if (a >= 0 && a < r && b >= 0 && b < r) std::swap(perm[std::size_t(a)], perm[std::size_t(b)]);
  else perm.clear();  // the permute rule reports the bad axes
  return permute(x, perm, loc);
}
Expr expand(Expr x, Shape shape, Loc loc) {
  UserSite site(graph_of("expand", loc, {x}), loc);
  return {x.g, op::expand(*x.g, x.id, std::move(shape), loc)};
}
Expr slice(Expr x, std::int64_t axis, std::int64_t begin, std::int64_t end, Loc loc) {
  UserSite site(graph_of("slice", loc, {x}), loc);
  return {x.g, op::slice(*x.g, x.id, axis, begin, end, loc)};
}
Expr concat(const std::vector<Expr>& xs, std::int64_t axis, Loc loc) {
  if (xs.empty()) throw GraphError(fmt::format("concat at {}: no operands (an empty list)", site_string(loc)));
  for (const Expr& e : xs) graph_of("concat", loc, {xs[0], e});
  UserSite site(*xs[0].g, loc);
  std::vector<NodeId> ids;
  for (const Expr& e : xs) ids.push_back(e.id);
  return {xs[0].g, op::concat(*xs[0].g, ids, axis, loc)};
}
Expr gather(Expr x, Expr index, std::int64_t axis, Loc loc) {
  UserSite site(graph_of("gather", loc, {x, index}), loc);
  return {x.g, op::gather(*x.g, x.id, index.id, axis, loc)};
}

std::vector<Expr> params(Graph& g) {
  std::vector<Expr> r;
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op == OpKind::param) r.push_back({&g, i});
  return r;
}

std::vector<Expr> grad(Expr out, const std::vector<Expr>& wrt, Loc loc) {
  graph_of("grad", loc, {out});
  std::vector<NodeId> ids;
  for (const Expr& e : wrt) {
    graph_of("grad", loc, {out, e});
    ids.push_back(e.id);
  }
  std::vector<NodeId> gs = gg::grad(*out.g, out.id, ids, -1, loc);
  std::vector<Expr> r;
  for (NodeId id : gs) r.push_back({out.g, id});
  return r;
}

std::vector<Expr> hvp(Expr loss, const std::vector<Expr>& params, const std::vector<Expr>& v, Loc loc) {
  graph_of("hvp", loc, {loss});
  std::vector<NodeId> p, w;
  for (const Expr& e : params) {
    graph_of("hvp", loc, {loss, e});
    p.push_back(e.id);
  }
  for (const Expr& e : v) {
    graph_of("hvp", loc, {loss, e});
    w.push_back(e.id);
  }
  std::vector<NodeId> hv = gg::hvp(*loss.g, loss.id, p, w, loc);
  std::vector<Expr> r;
  for (NodeId id : hv) r.push_back({loss.g, id});
  return r;
}

}  // namespace gg::dsl
