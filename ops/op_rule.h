// What each primitive provides, side by side in one place: its shape rule, its kernel
// and its gradient rule. The rules live in the op family files (elementwise.cpp,
// reduce.cpp, ...) and are found through the op table generated from op_list.def.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
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
  // A matmul's epilogue (ops/gemm.h's GemmRowsDone), or null: called with ranges of the
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

struct OpRule {
  void (*infer)(const Graph& g, Node& n);      // sets n.shape, n.dtype; may normalize attrs; g.fail() on error
  void (*kernel)(const KernelArgs& a);         // computes out from in
  void (*grad)(GradArgs& a);                   // nullptr: no gradient flows through
};

const OpRule& op_rule(OpKind k);

#define OP(name, arity) extern const OpRule name##_rule;
#include "op_list.def"
#undef OP

}  // namespace gg
