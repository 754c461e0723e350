// What users write: Expr handles over graph nodes with + - * / and matmul, leaves
// (input, param, constant), scoped names, and one free function per primitive. Every
// call records the user's source line, so a shape error points at the user's code.
// Composite layers (linear, softmax, attention, ...) are in dsl/nn.h.
#pragma once

#include <initializer_list>
#include <source_location>
#include <string>
#include <vector>

#include "../autodiff/grad.h"
#include "../autodiff/hvp.h"
#include "../ops/ir/build.h"
#include "../ops/ir/graph.h"

namespace gg::dsl {

using Loc = std::source_location;

// A handle to one node of a graph. Cheap to copy; the graph must outlive it. A default-
// constructed Expr is empty: using it throws GraphError, and so does combining handles of
// two different graphs.
struct Expr {
  Graph* g = nullptr;
  NodeId id = -1;

  bool empty() const { return g == nullptr; }
  const Node& node() const;  // throws GraphError if empty
  const Shape& shape() const { return node().shape; }
  std::int64_t dim(int axis) const;  // negative counts from the end
  int rank() const { return int(shape().size()); }
  DType dtype() const { return node().dtype; }
  const std::string& name() const { return node().name; }
};

// An operand of an operator, carrying the line where the user wrote the expression
// (operators cannot take a defaulted source_location, a converting constructor can).
struct Operand {
  Expr e;
  float value = 0.f;
  bool is_scalar = false;
  Loc loc;
  Operand(Expr x, Loc l = Loc::current()) : e(x), loc(l) {}
  Operand(float v, Loc l = Loc::current()) : value(v), is_scalar(true), loc(l) {}
  Operand(double v, Loc l = Loc::current()) : value(float(v)), is_scalar(true), loc(l) {}
  Operand(int v, Loc l = Loc::current()) : value(float(v)), is_scalar(true), loc(l) {}
};

Expr operator+(Expr a, Operand b);
Expr operator-(Expr a, Operand b);
Expr operator*(Expr a, Operand b);
Expr operator/(Expr a, Operand b);
Expr operator+(float a, Operand b);
Expr operator-(float a, Operand b);
Expr operator*(float a, Operand b);
Expr operator/(float a, Operand b);
Expr operator-(Operand a);

// Leaves.
Expr input(Graph& g, const std::string& name, Shape shape, DType dtype = DType::f32, Loc loc = Loc::current());
Expr param(Graph& g, const std::string& name, Shape shape, Init init = {}, Loc loc = Loc::current());
Expr constant(Graph& g, std::vector<float> values, Shape shape, DType dtype = DType::f32, Loc loc = Loc::current());
Expr scalar(Graph& g, float v, Loc loc = Loc::current());
Init normal_init(float std, float mean = 0.f);
Init uniform_init(float lo, float hi);
inline Init zeros_init() { return {Init::zeros, 0, 0}; }
inline Init ones_init() { return {Init::ones, 0, 0}; }

// Name scope: nodes built while it is open are named "<scope>" (leaves "<scope>.<name>"),
// parameters included: a layer's weights are its own ("blocks.1.fc.weight").
using Scope = NameScope;
// Step scope: names the nodes of one step of a loop ("step.3.gru.hh") but not the
// parameters it declares, which every step shares ("gru.hh.weight"):
//   for (int t = 0; t < T; ++t) {
//     StepScope step(g, "step", t);
//     h = tanh(linear(x[t], H, "rnn.ih") + linear(h, H, "rnn.hh"));  // the same weights each step
//   }
// A shared weight re-declared under a plain Scope named like a step ("step.4") throws
// GraphError naming both declarations, instead of silently making a copy for that step.
using StepScope = ::gg::StepScope;

// Primitives.
Expr matmul(Expr a, Expr b, bool trans_a = false, bool trans_b = false, Loc loc = Loc::current());
// The unary and binary element-wise primitives of ops/ir/op_list.def, one function each:
// exp(x), tanh(x), ..., maximum(a, b), add(a, b) (the operators above are the same ops).
#define GG_DSL_leaf(name)
#define GG_DSL_other(name)
#define GG_DSL_unary(name) Expr name(Expr x, Loc loc = Loc::current());
#define GG_DSL_binary(name) Expr name(Expr a, Expr b, Loc loc = Loc::current());
#define OP(name, arity, family) GG_DSL_##family(name)
#include "../ops/ir/op_list.def"
#undef OP
#undef GG_DSL_leaf
#undef GG_DSL_other
#undef GG_DSL_unary
#undef GG_DSL_binary
Expr compare(Expr a, Expr b, Cmp cmp, Loc loc = Loc::current());
Expr where(Expr cond, Expr a, Expr b, Loc loc = Loc::current());
Expr sum(Expr x, std::int64_t axis, bool keepdim = false, Loc loc = Loc::current());
Expr max(Expr x, std::int64_t axis, bool keepdim = false, Loc loc = Loc::current());
// i32 index of the largest entry along axis (first on ties, as torch.argmax); no gradient.
Expr argmax(Expr x, std::int64_t axis, bool keepdim = false, Loc loc = Loc::current());
Expr mean(Expr x, std::int64_t axis, bool keepdim = false, Loc loc = Loc::current());
Expr sum_all(Expr x, Loc loc = Loc::current());   // to a scalar
Expr mean_all(Expr x, Loc loc = Loc::current());  // to a scalar
Expr reshape(Expr x, Shape shape, Loc loc = Loc::current());
// The value of x, through which no gradient flows (PyTorch's x.detach(), JAX's
// stop_gradient): grad() treats the result as a constant and builds nothing behind it.
// Free at run time (a view). E.g. softmax's shift: exp(x - stop_gradient(max(x, -1, true))).
Expr stop_gradient(Expr x, Loc loc = Loc::current());
Expr permute(Expr x, Shape perm, Loc loc = Loc::current());
Expr transpose(Expr x, int a = -2, int b = -1, Loc loc = Loc::current());
Expr expand(Expr x, Shape shape, Loc loc = Loc::current());
Expr slice(Expr x, std::int64_t axis, std::int64_t begin, std::int64_t end, Loc loc = Loc::current());
Expr concat(const std::vector<Expr>& xs, std::int64_t axis, Loc loc = Loc::current());
Expr gather(Expr x, Expr index, std::int64_t axis = 0, Loc loc = Loc::current());

// For composites: a check of the composite's own fails at the user's call (the outermost
// UserSite), named by the composite and the current scope, by throwing GraphError
// "<what> at <file>:<line> ('<scope>'): <msg>".
[[noreturn]] void fail_at_call(const Graph& g, const char* what, Loc loc, const std::string& msg);

// Every parameter node of the graph, in declaration order.
std::vector<Expr> params(Graph& g);

// Gradients of a scalar with respect to each of wrt, as graph nodes (see autodiff/grad.h).
// A non-scalar `out` or a wrt of another graph is reported at the caller's line.
std::vector<Expr> grad(Expr out, const std::vector<Expr>& wrt, Loc loc = Loc::current());
// Hessian-vector products (H v)_i for each of params, v[i] shaped like params[i] (see autodiff/hvp.h).
std::vector<Expr> hvp(Expr loss, const std::vector<Expr>& params, const std::vector<Expr>& v, Loc loc = Loc::current());

// The node ids of `xs` for an Executor of `g` (Executor(g, node_ids(g, {loss, pred}), store));
// throws GraphError if one is empty or belongs to another graph (an id alone cannot tell).
std::vector<NodeId> node_ids(const Graph& g, const std::vector<Expr>& xs, Loc loc = Loc::current());

// The graph all of `xs` belong to; throws GraphError "<what> at <file>:<line>: ..." when
// one is empty or two belong to different graphs (naming both nodes).
Graph& graph_of(const char* what, Loc loc, std::initializer_list<Expr> xs);

}  // namespace gg::dsl
