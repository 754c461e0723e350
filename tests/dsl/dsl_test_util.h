// Helpers for the DSL tests: deterministic sample values, a weighted-sum loss, random
// parameter values, a gradcheck over every parameter, and running a graph once.
// Header-only, included by the tests/dsl executables (test_nn.cpp still has its own copies).
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "autodiff/gradcheck.h"
#include "dsl/expr.h"
#include "ops/runtime/executor.h"

namespace gg::test {

inline std::vector<float> vals(std::int64_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

inline Tensor tensor(Shape s, float lo, float hi, unsigned seed) { return Tensor::f32(s, vals(numel(s), lo, hi, seed)); }

// sum(out * w), w fixed random with mixed signs.
inline dsl::Expr weighted_sum(dsl::Expr out, unsigned seed = 99) {
  std::vector<float> w = vals(numel(out.shape()), 0.5f, 1.5f, seed);
  for (std::size_t i = 0; i < w.size(); i += 2) w[i] = -w[i];
  return dsl::sum_all(out * dsl::constant(*out.g, w, out.shape()));
}

// Creates the graph's params and gives them non-degenerate values: norm weights near 1,
// everything else uniform in [-a, a).
inline void randomize(Graph& g, ParamStore& ps, float a = 0.5f, unsigned seed = 1) {
  ps.init_missing(g, seed);
  for (auto& [name, t] : ps.all()) {
    std::vector<float> v = vals(t.numel(), -a, a, seed++);
    if (name.find("norm") != std::string::npos && name.ends_with(".weight"))
      for (float& x : v) x = 1.f + 0.4f * x;
    t = Tensor::f32(t.shape(), v);
  }
}

// gradcheck of `loss` w.r.t. every param of the graph and the given extra nodes.
inline void check_grads(Graph& g, dsl::Expr loss, ParamStore& ps, const std::map<std::string, Tensor>& inputs,
                        std::vector<dsl::Expr> extra_wrt = {}, GradcheckOptions o = {}) {
  std::vector<NodeId> wrt;
  for (dsl::Expr p : dsl::params(g)) wrt.push_back(p.id);
  for (dsl::Expr e : extra_wrt) wrt.push_back(e.id);
  REQUIRE(!wrt.empty());
  GradcheckResult r = gradcheck(g, loss.id, wrt, ps, inputs, o);
  INFO("worst: " << r.worst << " (|err| " << r.worst_abs << ", " << r.checked << " checked)");
  CHECK(r.ok);
  CHECK(r.checked > 0);
}

// Runs outs with the given inputs (those the graph has) and returns their values.
inline std::vector<Tensor> run(Graph& g, std::vector<dsl::Expr> outs, ParamStore& ps,
                               const std::map<std::string, Tensor>& inputs, std::uint64_t seed = 0) {
  std::vector<NodeId> ids;
  for (dsl::Expr e : outs) ids.push_back(e.id);
  Executor ex(g, ids, ps, seed);
  for (auto& [n, t] : inputs)
    if (ex.has_input(n)) ex.set_input(n, t);
  ex.run();
  std::vector<Tensor> r;
  for (NodeId id : ids) r.push_back(ex.get(id));
  return r;
}

}  // namespace gg::test
