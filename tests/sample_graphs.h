// The sample graphs of every primitive, one small graph per op kind (a table keyed by kind),
// shared by the gradient checker's test (tests/autodiff/test_gradcheck.cpp) and the f64
// reference interpreter's test (tests/ops/test_eval_f64.cpp). A primitive of
// ops/ir/op_list.def without an entry fails the coverage test by name.
// Losses are sum(out * fixed random weights), so no gradient is trivially uniform.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/ir/graph.h"
#include "ops/ir/tensor.h"

namespace gg::sample {

// One sample graph for one primitive.
struct Case {
  // check: gradcheck; no_grad: grad must be 0; refused: grad throws GraphError (a rule that
  // refuses by name instead of building a gradient: attention_back's second derivatives)
  enum Kind { check, no_grad, leaf, refused } kind = check;
  NodeId loss = -1;                                 // scalar
  std::vector<NodeId> wrt;                          // params / inputs checked (no_grad: must get zeros)
  ParamStore params;
  std::map<std::string, Tensor> inputs;
  std::string note;                                 // what the entry covers
};

// Deterministic sample values in [lo, hi).
inline std::vector<float> vals(std::int64_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// A param with the given values, registered in the case's store.
inline NodeId param_with(Graph& g, Case& c, const std::string& name, Shape s, std::vector<float> v) {
  REQUIRE(std::int64_t(v.size()) == numel(s));
  c.params.set(name, Tensor::f32(s, v));
  return op::param(g, name, s, Init{});
}
// The seed of param_rand's values for a param named `name`.
inline unsigned name_seed(const std::string& name, unsigned seed = 7) {
  return seed + unsigned(name.size()) * 31u + unsigned(name[0]);
}
inline NodeId param_rand(Graph& g, Case& c, const std::string& name, Shape s, float lo = -1.f, float hi = 1.f,
                  unsigned seed = 7) {
  return param_with(g, c, name, s, vals(numel(s), lo, hi, name_seed(name, seed)));
}

// The sample domain of a unary element-wise primitive: [lo, hi) without (-gap, gap), for
// an op with a kink at 0 (relu, abs), where the gradient check's central differences
// would straddle it.
struct Domain {
  float lo, hi;
  float gap = 0.f;
};

// Deterministic sample values spread evenly over domain d (lo < -gap and gap < hi when gap > 0):
// u drawn from [lo, hi - 2 gap), moved up by 2 gap from -gap on. With gap 0, vals(n, lo, hi, seed).
inline std::vector<float> vals(std::int64_t n, const Domain& d, unsigned seed) {
  std::vector<float> v = vals(n, d.lo, d.hi - 2 * d.gap, seed);
  if (d.gap > 0)
    for (float& x : v)
      if (x >= -d.gap) x += 2 * d.gap;
  return v;
}

// The sample domain of each unary element-wise primitive: its gradient-check entry and the
// generic record tests (tests/ops/test_records.cpp) draw values from it.
inline const std::map<OpKind, Domain>& unary_ranges() {
  static const std::map<OpKind, Domain> r = {
      {OpKind::neg, {-2.f, 2.f}},        {OpKind::exp, {-1.5f, 1.5f}}, {OpKind::log, {0.5f, 3.f}},
      {OpKind::sqrt, {0.5f, 3.f}},       {OpKind::tanh, {-2.f, 2.f}},  {OpKind::erf, {-1.5f, 1.5f}},
      {OpKind::sigmoid, {-4.f, 4.f}},    {OpKind::relu, {-2.f, 2.f, 0.1f}},
      {OpKind::softplus, {-6.f, 6.f}},   {OpKind::abs, {-2.f, 2.f, 0.1f}},
      {OpKind::sin, {-3.f, 3.f}},        {OpKind::cos, {-3.f, 3.f}},
  };
  return r;
}

// sum(out * w) over all elements, w fixed random in [0.5, 1.5) with alternating sign.
inline NodeId weighted_sum(Graph& g, NodeId out, unsigned seed = 99) {
  const Shape s = g.node(out).shape;
  std::vector<float> w = vals(numel(s), 0.5f, 1.5f, seed);
  for (std::size_t i = 0; i < w.size(); i += 2) w[i] = -w[i];
  NodeId y = op::mul(g, out, op::constant(g, w, s));
  if (!s.empty()) y = op::sum(g, op::reshape(g, y, {-1}), 0);
  return y;
}

inline NodeId i32_const(Graph& g, std::vector<float> v, Shape s) { return op::constant(g, std::move(v), s, DType::i32); }

using Builder = std::function<void(Graph&, Case&)>;

// The table: one entry per primitive.
inline std::map<OpKind, Builder> gradcheck_table() {
  std::map<OpKind, Builder> t;

  // ---- leaves ----------------------------------------------------------------------
  t[OpKind::input] = [](Graph& g, Case& c) {  // leaf; gradients flow *to* an input
    c.kind = Case::leaf;
    NodeId x = op::input(g, "x", {3, 4});
    c.inputs["x"] = Tensor::f32({3, 4}, vals(12, -1, 1, 1));
    c.loss = weighted_sum(g, op::exp(g, x));
    c.wrt = {x};
  };
  t[OpKind::param] = [](Graph& g, Case& c) {  // leaf; d/dp sum(p * w) = w
    c.kind = Case::leaf;
    NodeId p = param_rand(g, c, "p", {2, 3});
    c.loss = weighted_sum(g, p);
    c.wrt = {p};
  };
  t[OpKind::constant] = [](Graph& g, Case& c) {  // leaf: data fixed at build time
    c.kind = Case::leaf;
    NodeId p = param_rand(g, c, "p", {2, 3});
    NodeId k = op::constant(g, vals(6, -2, 2, 3), {2, 3});
    c.loss = weighted_sum(g, op::mul(g, p, k));
    c.wrt = {p};
  };
  t[OpKind::random] = [](Graph& g, Case& c) {  // leaf, redrawn each run: no gradient flows
    c.kind = Case::no_grad;
    NodeId p = param_rand(g, c, "p", {2, 3});
    NodeId r = op::random(g, {2, 3});
    // r does not depend on p; grad of sum(r * w) wrt p must be zeros.
    c.loss = weighted_sum(g, op::add(g, r, op::mul(g, op::scalar(g, 0.f), op::compare(g, p, p, Cmp::eq))));
    c.wrt = {p};
  };

  // ---- element-wise, with broadcasting (exercises the central sum_to) ---------------
  t[OpKind::add] = [](Graph& g, Case& c) {
    c.note = "(2, 3, 4) + (3, 1)";
    NodeId a = param_rand(g, c, "a", {2, 3, 4});
    NodeId b = param_rand(g, c, "b", {3, 1});
    c.loss = weighted_sum(g, op::add(g, a, b));
    c.wrt = {a, b};
  };
  t[OpKind::sub] = [](Graph& g, Case& c) {
    c.note = "(4,) - (2, 3, 4) and scalar - (2, 3, 4)";
    NodeId a = param_rand(g, c, "a", {4});
    NodeId b = param_rand(g, c, "b", {2, 3, 4});
    NodeId s = param_rand(g, c, "s", {});
    c.loss = op::add(g, weighted_sum(g, op::sub(g, a, b)), weighted_sum(g, op::sub(g, s, b), 5));
    c.wrt = {a, b, s};
  };
  t[OpKind::mul] = [](Graph& g, Case& c) {
    c.note = "(2, 1, 4) * (3, 1)";
    NodeId a = param_rand(g, c, "a", {2, 1, 4});
    NodeId b = param_rand(g, c, "b", {3, 1});
    c.loss = weighted_sum(g, op::mul(g, a, b));
    c.wrt = {a, b};
  };
  t[OpKind::div] = [](Graph& g, Case& c) {
    c.note = "(2, 3) / (3,), divisor in [0.5, 1.5)";
    NodeId a = param_rand(g, c, "a", {2, 3});
    NodeId b = param_rand(g, c, "b", {3}, 0.5f, 1.5f);
    c.loss = weighted_sum(g, op::div(g, a, b));
    c.wrt = {a, b};
  };
  t[OpKind::maximum] = [](Graph& g, Case& c) {
    c.note = "(2, 4) vs (4,), operands 0.5 apart (no ties)";
    std::vector<float> av = vals(8, -1, 1, 11), bv(4);
    for (int j = 0; j < 4; ++j) bv[std::size_t(j)] = av[std::size_t(j)] + (j % 2 ? 0.5f : -0.5f);
    for (int j = 0; j < 4; ++j) av[std::size_t(4 + j)] = bv[std::size_t(j)] + (j < 2 ? 0.6f : -0.6f);
    NodeId a = param_with(g, c, "a", {2, 4}, av);
    NodeId b = param_with(g, c, "b", {4}, bv);
    c.loss = weighted_sum(g, op::maximum(g, a, b));
    c.wrt = {a, b};
  };
  auto unary = [](OpKind k, Domain d) {
    return [=](Graph& g, Case& c) {
      c.note = std::string(op_name(k)) + " on [" + std::to_string(d.lo) + ", " + std::to_string(d.hi) + ")";
      if (d.gap > 0) c.note += " without (-" + std::to_string(d.gap) + ", " + std::to_string(d.gap) + ")";
      NodeId x = param_with(g, c, "x", {3, 5}, vals(15, d, name_seed("x")));
      c.loss = weighted_sum(g, g.add(k, {x}));
      c.wrt = {x};
    };
  };
  for (const auto& [k, d] : unary_ranges()) t[k] = unary(k, d);
  t[OpKind::compare] = [](Graph& g, Case& c) {  // a step function: no gradient flows
    c.kind = Case::no_grad;
    std::vector<float> av = vals(6, -1, 1, 5);
    NodeId a = param_with(g, c, "a", {2, 3}, av);
    NodeId b = param_rand(g, c, "b", {3}, 2.f, 3.f);  // far from a: no flip under a step
    c.loss = weighted_sum(g, op::compare(g, a, b, Cmp::lt));
    c.wrt = {a, b};
  };
  t[OpKind::where] = [](Graph& g, Case& c) {
    c.note = "cond (3, 1), a (3, 4), b (4,)";
    NodeId cond = op::constant(g, {1, 0, 1}, {3, 1});
    NodeId a = param_rand(g, c, "a", {3, 4});
    NodeId b = param_rand(g, c, "b", {4});
    c.loss = weighted_sum(g, op::where(g, cond, a, b));
    c.wrt = {a, b};
  };

  // ---- reductions ------------------------------------------------------------------
  t[OpKind::sum] = [](Graph& g, Case& c) {
    c.note = "axis 1 with and without keepdim, axis -1";
    NodeId x = param_rand(g, c, "x", {2, 3, 4});
    NodeId a = weighted_sum(g, op::sum(g, x, 1, false), 1);
    NodeId b = weighted_sum(g, op::sum(g, x, 1, true), 2);
    NodeId d = weighted_sum(g, op::sum(g, x, -1, false), 3);
    c.loss = op::add(g, op::add(g, a, b), d);
    c.wrt = {x};
  };
  t[OpKind::max] = [](Graph& g, Case& c) {
    c.note = "distinct values 0.25 apart; axis 0 keepdim, axis 1";
    std::vector<float> v(12);
    std::vector<int> perm = {7, 2, 11, 0, 5, 9, 3, 10, 1, 8, 4, 6};
    for (std::size_t i = 0; i < 12; ++i) v[i] = -1.5f + 0.25f * float(perm[i]);
    NodeId x = param_with(g, c, "x", {3, 4}, v);
    c.loss = op::add(g, weighted_sum(g, op::max(g, x, 0, true), 1), weighted_sum(g, op::max(g, x, 1, false), 2));
    c.wrt = {x};
  };

  t[OpKind::argmax] = [](Graph& g, Case& c) {  // a step function with i32 output: no gradient flows
    c.kind = Case::no_grad;
    c.note = "argmax over axis 1, compared with fixed i32 indices to reach a f32 loss";
    std::vector<float> v = {0.1f, 2.f, -1.f, 1.f, 3.f, 0.f, -2.f, 1.5f, 0.5f};  // row maxima >= 0.5 apart
    NodeId x = param_with(g, c, "x", {3, 3}, v);
    NodeId hit = op::compare(g, op::argmax(g, x, 1), i32_const(g, {1, 0, 2}, {3}), Cmp::eq);  // (3): 1, 0, 0
    c.loss = weighted_sum(g, hit);
    c.wrt = {x};
  };

  // ---- matmul: all four transpose flags, broadcast batch, shared 2-D right operand ---
  t[OpKind::matmul] = [](Graph& g, Case& c) {
    c.note = "ta/tb in {0,1}^2 with batch (2,1) x (3,), plus (2,3,4) @ (4,5) and @ (5,4)^T";
    NodeId loss = -1;
    unsigned seed = 20;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const std::string sfx = std::to_string(ta) + std::to_string(tb);
        Shape sa = ta ? Shape{2, 1, 4, 3} : Shape{2, 1, 3, 4};  // (2, 1, M=3, K=4)
        Shape sb = tb ? Shape{3, 5, 4} : Shape{3, 4, 5};        // (3, K=4, N=5)
        NodeId a = param_rand(g, c, "a" + sfx, sa);
        NodeId b = param_rand(g, c, "b" + sfx, sb);
        NodeId y = weighted_sum(g, op::matmul(g, a, b, ta, tb), seed++);  // (2, 3, 3, 5)
        loss = loss < 0 ? y : op::add(g, loss, y);
        c.wrt.push_back(a);
        c.wrt.push_back(b);
      }
    for (int tb = 0; tb < 2; ++tb) {  // B shared by every batch: the reshaped gradient path
      const std::string sfx = "shared" + std::to_string(tb);
      NodeId a = param_rand(g, c, "a" + sfx, {2, 3, 4});
      NodeId b = param_rand(g, c, "b" + sfx, tb ? Shape{5, 4} : Shape{4, 5});
      loss = op::add(g, loss, weighted_sum(g, op::matmul(g, a, b, false, tb), seed++));
      c.wrt.push_back(a);
      c.wrt.push_back(b);
    }
    NodeId a2 = param_rand(g, c, "plain_a", {3, 4});  // plain 2-D @ batched 3-D
    NodeId b2 = param_rand(g, c, "plain_b", {2, 4, 2});
    c.loss = op::add(g, loss, weighted_sum(g, op::matmul(g, a2, b2), seed++));
    c.wrt.push_back(a2);
    c.wrt.push_back(b2);
  };

  // ---- movement --------------------------------------------------------------------
  t[OpKind::reshape] = [](Graph& g, Case& c) {
    NodeId x = param_rand(g, c, "x", {2, 6});
    c.loss = weighted_sum(g, op::tanh(g, op::reshape(g, x, {3, -1})));
    c.wrt = {x};
  };
  t[OpKind::permute] = [](Graph& g, Case& c) {
    NodeId x = param_rand(g, c, "x", {2, 3, 4});
    NodeId y = op::permute(g, x, {2, 0, 1});  // (4, 2, 3)
    // Multiplying by a (4, 1, 3) tensor makes the gradient depend on the permutation.
    c.loss = weighted_sum(g, op::mul(g, y, op::constant(g, vals(12, -1, 1, 4), {4, 1, 3})));
    c.wrt = {x};
  };
  t[OpKind::expand] = [](Graph& g, Case& c) {
    NodeId x = param_rand(g, c, "x", {3, 1});
    NodeId s = param_rand(g, c, "s", {});
    c.loss = op::add(g, weighted_sum(g, op::expand(g, x, {2, 3, 4})), weighted_sum(g, op::expand(g, s, {2, 2}), 3));
    c.wrt = {x, s};
  };
  t[OpKind::slice] = [](Graph& g, Case& c) {
    c.note = "interior [1, 4) of axis 1, a prefix and a negative-begin suffix of axis 0";
    NodeId x = param_rand(g, c, "x", {3, 5});
    NodeId a = weighted_sum(g, op::slice(g, x, 1, 1, 4), 1);
    NodeId b = weighted_sum(g, op::slice(g, x, 0, 0, 2), 2);
    NodeId d = weighted_sum(g, op::slice(g, x, 0, -1, 3), 3);
    c.loss = op::add(g, op::add(g, a, b), d);
    c.wrt = {x};
  };
  t[OpKind::concat] = [](Graph& g, Case& c) {
    NodeId a = param_rand(g, c, "a", {2, 1, 3});
    NodeId b = param_rand(g, c, "b", {2, 3, 3});
    NodeId d = param_rand(g, c, "d", {2, 2, 3});
    c.loss = op::add(g, weighted_sum(g, op::concat(g, {a, b, d}, 1)), weighted_sum(g, op::concat(g, {d, a}, -2), 5));
    c.wrt = {a, b, d};
  };

  // ---- indexing, with repeated indices ----------------------------------------------
  t[OpKind::gather] = [](Graph& g, Case& c) {
    c.note = "axis 0 with index (2, 3) repeating rows; axis 1 with repeats";
    NodeId x = param_rand(g, c, "x", {5, 3});
    NodeId i0 = i32_const(g, {1, 3, 1, 4, 1, 0}, {2, 3});
    NodeId i1 = i32_const(g, {2, 2, 0, 2}, {4});
    c.loss = op::add(g, weighted_sum(g, op::gather(g, x, i0, 0), 1), weighted_sum(g, op::gather(g, x, i1, 1), 2));
    c.wrt = {x};
  };
  t[OpKind::scatter_add] = [](Graph& g, Case& c) {
    c.note = "src (2, 4, 3) into axis 1 of size 3 with index (4,) = {2, 0, 2, 2}";
    NodeId s = param_rand(g, c, "src", {2, 4, 3});
    NodeId idx = i32_const(g, {2, 0, 2, 2}, {4});
    NodeId y = op::scatter_add(g, s, idx, 1, 3);  // (2, 3, 3)
    c.loss = weighted_sum(g, op::tanh(g, y));     // non-linear: rows that collide interact
    c.wrt = {s};
  };

  // ---- the fused attention pair ------------------------------------------------------
  // A mask (2, 5, 6) with a zero or two in every row, never a whole row.
  auto attention_mask = [](Graph& g) {
    std::vector<float> m(60);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = (i * 7) % 5 == 3 ? 0.f : 1.f;
    return op::constant(g, m, {2, 5, 6});
  };
  t[OpKind::attention] = [attention_mask](Graph& g, Case& c) {
    c.note = "q (2, 5, 4), k (2, 6, 4), v (2, 6, 3), unmasked and masked (2, 5, 6); each row's log-sum-exp in the loss too";
    NodeId q = param_rand(g, c, "q", {2, 5, 4});
    NodeId k = param_rand(g, c, "k", {2, 6, 4});
    NodeId v = param_rand(g, c, "v", {2, 6, 3});
    NodeId plain = op::attention(g, q, k, v, -1, 0.5f);                  // (2, 5, 4)
    NodeId masked = op::attention(g, q, k, v, attention_mask(g), 0.7f);  // (2, 5, 4)
    c.loss = op::add(g, weighted_sum(g, plain, 1), weighted_sum(g, masked, 2));
    c.wrt = {q, k, v};
  };
  t[OpKind::attention_back] = [attention_mask](Graph& g, Case& c) {
    c.kind = Case::refused;
    c.note = "attention's gradient for a given d(loss)/d(out); no second derivatives: its rule refuses by name";
    NodeId q = param_rand(g, c, "q", {2, 5, 4});
    NodeId k = param_rand(g, c, "k", {2, 6, 4});
    NodeId v = param_rand(g, c, "v", {2, 6, 3});
    NodeId mask = attention_mask(g);
    NodeId fwd = op::attention(g, q, k, v, mask, 0.7f);   // (2, 5, 4)
    NodeId gout = param_rand(g, c, "gout", {2, 5, 4});
    c.loss = weighted_sum(g, op::attention_back(g, q, k, v, mask, fwd, gout, 0.7f));  // (2, 20 + 24 + 18)
    c.wrt = {q, k, v};
  };
  return t;
}

inline bool uses_op(const Graph& g, NodeId root, OpKind k) {
  for (NodeId id : ancestors(g, {root}))
    if (g.node(id).op == k) return true;
  return false;
}

}  // namespace gg::sample
