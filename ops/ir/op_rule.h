// A primitive's record: everything the engine knows about it, registered together next to
// its kernel: its class for the planner, shape rule, kernel, gradient rule, tangent rule
// and f64 reference evaluation, and for element-wise ones the element function that fused
// groups run. The records live in the op family files (elementwise_fn.h, reduce.cpp, ...)
// and are found through the op table generated from op_list.def; passes ask the record
// (op_rule(k)) instead of switching on the op kind.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "graph.h"

namespace gg {

// A tensor as a kernel sees it: contiguous row-major data of the node's shape.
struct View {
  void* data = nullptr;
  const Shape* shape = nullptr;
  DType dtype = DType::f32;
  float* f() const { return static_cast<float*>(data); }
  std::int32_t* i() const { return static_cast<std::int32_t*>(data); }
  std::int64_t numel() const { return gg::numel(*shape); }
  std::span<float> fspan() const { return {f(), std::size_t(numel())}; }
};

struct KernelArgs {
  const Node& node;
  std::span<const View> in;
  View out;
  std::mt19937_64* rng;  // for `random`
  // A matmul's epilogue (ops/cpu/gemm.h's GemmRowsDone), or null: called with ranges of the
  // output's rows (its values as (rows, last dim)) once they are final.
  const std::function<void(std::int64_t, std::int64_t)>* rows_done = nullptr;
};

// A gradient rule receives d(loss)/d(out) as `gout` and sets gin[i] for each input i
// with needs[i], as graph nodes; a gradient may keep the broadcast shape of the output,
// the reverse pass sums it down to the input's shape.
struct GradArgs {
  Graph& g;
  NodeId node;
  NodeId gout;
  const std::vector<bool>& needs;
  std::vector<NodeId>& gin;
  const Node& n() const { return g.node(node); }
  NodeId in(int i) const { return g.node(node).inputs[std::size_t(i)]; }
};

struct TangentShape;  // ops/ir/tangent.h
struct F64Args;       // ops/ir/eval_f64.h

// How the planner treats a primitive.
enum class OpClass : std::uint8_t {
  bound_leaf,   // input, param, constant: its value exists before any step runs
  noise,        // random: a leaf drawn by a step of its own
  elementwise,  // arithmetic on values at the same (broadcast) position: fusable anywhere
  selection,    // element-wise by an attribute or a condition (compare, where)
  reduction,    // over one axis (sum, max, argmax)
  product,      // matmul
  movement,     // reshape, permute, expand, slice, concat: values moved, none computed
  indexing,     // gather, scatter_add
  // A composite's whole computation in one kernel of its own (attention and attention_back:
  // products, a softmax and their gradients by blocks): opaque to the passes, which leave it
  // as one step. Not a product: a Bf16Products scope leaves it in f32.
  composite,
};

// The element function of an element-wise primitive over runs of f32 values, as the
// fused groups' interpreter runs it (the op's own kernel runs the same function).
struct ElementFns {
  void (*map)(std::size_t n, float* dst, const float* x);                   // unary: dst = f(x)
  void (*zip)(std::size_t n, float* dst, const float* x, const float* y);    // binary: dst = f(x, y)
  void (*zip_left)(std::size_t n, float* dst, float x, const float* y);      // f(x broadcast, y)
  void (*zip_right)(std::size_t n, float* dst, const float* x, float y);     // f(x, y broadcast)
  float (*scalar)(float x, float y);                                         // f on one value (unary: y unused)
  bool transcendental;  // its SIMD body and scalar tail may round apart (libm vs xsimd)
};

// out.constant (sized to the node's rank, all 0) gets the axes along which the node's
// tangent is the same at every index, from its inputs' (ops/ir/tangent.h); or out.cancelled.
using TangentRule = void (*)(const Graph& g, const Node& n, std::span<const TangentShape* const> in,
                             TangentShape& out);

// An identity rule (the simplification pass's): the id of an existing node of `t`, the
// graph being rebuilt, that node n on inputs `ins` of t equals (x + 0, reshape of a
// reshape, ...), or -1. It may rewrite ins and attrs (a permute of a permute becomes one
// permute of the inner input).
using IdentityRule = NodeId (*)(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs& attrs);
// For identity rules: whether n is an f32 constant all of whose values are v; and x when
// it has n's shape and dtype (so n may be replaced by it), else -1.
bool constant_all(const Node& n, float v);
NodeId same_value_as(const Graph& t, const Node& n, NodeId x);

struct OpRule {
  OpClass cls;
  void (*infer)(const Graph& g, Node& n);      // sets n.shape, n.dtype; may normalize attrs; g.fail() on error
  void (*kernel)(const KernelArgs& a);         // computes out from in
  void (*grad)(GradArgs& a);                   // nullptr: no gradient flows through
  TangentRule tangent = nullptr;               // nullptr: constant along no axis (always safe)
  void (*f64)(const F64Args& a) = nullptr;     // the value in double, a plain scalar loop
  const ElementFns* elem = nullptr;            // element-wise primitives
  IdentityRule identity = nullptr;             // nullptr: no identity
  std::string (*attr_text)(const Node& n) = nullptr;  // its attributes as listings show them, e.g. "axis=1"
};

const OpRule& op_rule(OpKind k);
inline OpClass op_class(OpKind k) { return op_rule(k).cls; }

#define OP(name, arity, family) extern const OpRule name##_rule;
#include "op_list.def"
#undef OP

}  // namespace gg
