// The fusion pass (ops/passes/fuse.h) changes no result: the reference GPT on the golden configs
// gives the same loss, logits and every parameter's gradient with fusion on and off, bit
// for bit (each fused member runs its op's own element function or row reduction on the
// same SIMD/scalar split, with no reassociation), at 1 and 2 threads, storing fewer values;
// so do layer_norm, softmax, log_softmax and cross_entropy with their gradients, on rows
// off the SIMD width. Every group of these plans is convex.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "dsl/nn.h"
#include "models/gpt.h"
#include "ops/cpu/parallel.h"
#include "tests/models/gpt_case.h"
#include "tests/test_util.h"

using namespace gg;

namespace {

// No path leaves a group and re-enters it; only its root and stored members are read
// outside it, by nodes after the root (the group runs at the root's place); a member
// reads only members computed before it.
void check_convex(const Graph& g, const Fusion& f) {
  for (std::size_t gi = 0; gi < f.groups.size(); ++gi) {
    const std::vector<FusedInstr>& prog = f.groups[gi].program;
    for (std::size_t k = 0; k < prog.size(); ++k) {
      const int operands[3] = {prog[k].a, prog[k].b, prog[k].c};
      for (int i = 0; i < op_arity(prog[k].op); ++i) CHECK(operands[i] < int(k));
    }
    std::vector<char> left(std::size_t(g.size()), 0);  // reached from the group through a non-member
    for (NodeId id = 0; id < g.size(); ++id) {
      const bool member = f.group_of[std::size_t(id)] == int(gi);
      for (NodeId in : g.node(id).inputs) {
        if (member) {
          CHECK(!left[std::size_t(in)]);
        } else {
          if (left[std::size_t(in)]) left[std::size_t(id)] = 1;
          if (f.group_of[std::size_t(in)] == int(gi)) {
            left[std::size_t(id)] = 1;
            const FusedGroup& grp = f.groups[gi];
            CHECK((in == grp.root || std::count(grp.stored.begin(), grp.stored.end(), in) == 1));
            CHECK(id > grp.root);  // the planned order is by id
          }
        }
      }
    }
  }
}

}  // namespace


namespace {


struct FusedRuns {
  std::size_t largest = 0;         // members of the fused plan's largest group
  std::size_t stored = 0;          // stored members over the fused plan's groups
  std::size_t bytes[2] = {0, 0};   // values stored, unfused and fused
  bool softmax_one_group = false;  // some group holds a row max, an exp, a row sum and a div
};

// Runs outs fused and unfused at 1, 2 and 3 threads, every parameter set to a fixed wave;
// all six runs must agree bit for bit, and every fused group be convex. At 2 and 3 threads the
// split of every job is skewed, one way unfused and the other fused (set_thread_shares).
FusedRuns same_fused_and_not(const Graph& g, const std::vector<NodeId>& outs,
                             const std::vector<std::pair<std::string, Tensor>>& feeds) {
  ParamStore ps;
  int salt = 0;
  for (const Node& n : g.nodes())
    if (n.op == OpKind::param) ps.set(n.name, Tensor::f32(n.shape, test::wave(numel(n.shape), 2.f, ++salt, 0.61)));
  std::vector<Tensor> want;
  FusedRuns r;
  const int before = num_threads();
  for (int threads : {1, 2, 3})
    for (bool fuse : {false, true}) {
      set_num_threads(threads);
      if (threads == 2) set_thread_shares(fuse ? std::vector<double>{3, 1} : std::vector<double>{1, 3});
      if (threads == 3) set_thread_shares(fuse ? std::vector<double>{1, 2, 3} : std::vector<double>{3, 1, 2});
      Executor ex(g, outs, ps, 5, {.simplify = true, .fuse = fuse});
      r.bytes[fuse] = ex.unshared_bytes();
      CHECK(ex.fusion().groups.empty() != fuse);
      if (fuse) check_convex(ex.planned_graph(), ex.fusion());
      if (fuse && threads == 1)
        for (const FusedGroup& grp : ex.fusion().groups) {
          r.largest = std::max(r.largest, grp.members.size());
          r.stored += grp.stored.size();
          bool has[4] = {};
          for (NodeId m : grp.members) {
            const OpKind k = ex.planned_graph().node(m).op;
            has[0] |= k == OpKind::max, has[1] |= k == OpKind::exp, has[2] |= k == OpKind::sum, has[3] |= k == OpKind::div;
          }
          r.softmax_one_group |= has[0] && has[1] && has[2] && has[3];
        }
      for (const auto& [name, t] : feeds)
        if (ex.has_input(name)) ex.set_input(name, t);
      ex.run();
      test::check_same_bits(ex, g, outs, want, "threads " + std::to_string(threads) + " fuse " + std::to_string(fuse));
    }
  set_thread_shares({});
  set_num_threads(before);
  return r;
}

}  // namespace

TEST_CASE("fuse: the reference GPT's loss, logits and gradients are unchanged by fusion, at 1, 2 and 3 threads") {
  for (const char* config : gg::test::kGoldenConfigs)
    for (bool training : {false, true}) {
      CAPTURE(config);
      CAPTURE(training);
      const auto gpt = gg::test::gpt_case(config, training);
      const FusedRuns r = same_fused_and_not(gpt->g, gpt->outs, gpt->feeds);
      CHECK(r.bytes[1] < r.bytes[0]);  // fewer values stored (the peak may not drop: a group's inputs live until its root)
      // The attention softmax's row max is detached (stop_gradient); the plan drops the mark,
      // so scale, mask, max, exp, sum and div run as one group.
      CHECK(r.softmax_one_group);
    }
}

TEST_CASE("fuse: layer_norm, softmax, log_softmax and cross_entropy, forward and gradients, match unfused bit for bit") {
  // Row lengths off and on the SIMD width; the rows of (3, 5, n).
  using namespace gg::dsl;
  for (std::int64_t n : {7, 64, 65}) {
    for (const char* layer : {"layer_norm", "softmax", "log_softmax", "cross_entropy"}) {
      CAPTURE(n);
      const std::string kind = layer;
      CAPTURE(kind);
      Graph g;
      Expr x = param(g, "x", {3, 5, n});
      Expr r = input(g, "r", {3, 5, n});  // weights the output so every gradient row differs
      Expr out;
      Expr loss;
      if (kind == "cross_entropy") {
        Expr targets = input(g, "targets", {3, 5}, DType::i32);
        out = log_softmax(x * r);
        loss = cross_entropy(x * r, targets);
      } else {
        out = kind == "layer_norm" ? layer_norm(x, "ln") : kind == "softmax" ? softmax(x) : log_softmax(x);
        loss = sum_all(out * r);
      }
      std::vector<NodeId> wrt;
      for (NodeId id = 0; id < g.size(); ++id)
        if (g.node(id).op == OpKind::param) wrt.push_back(id);
      std::vector<NodeId> outs = {out.id, loss.id};
      for (NodeId d : grad(g, loss.id, wrt)) outs.push_back(d);
      Tensor targets({3, 5}, DType::i32);
      for (std::int64_t i = 0; i < 15; ++i) targets.i()[i] = std::int32_t((i * 5 + 2) % n);
      const FusedRuns runs = same_fused_and_not(
          g, outs, {{"r", Tensor::f32({3, 5, n}, test::wave(15 * n, 1.f, 9, 0.61))}, {"targets", targets}});
      CHECK(runs.largest >= 4);  // a row statistic and its uses in one group
      CHECK(runs.stored > 0);    // the forward values the gradient reads are stored members
    }
  }
}
