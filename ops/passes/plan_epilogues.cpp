// The epilogue pass: which fused groups run as a matrix product's epilogue, on each block
// of the product's rows as soon as it is final (ExecutorOptions::epilogue).
#include <algorithm>
#include <cstdint>

#include "ops/cpu/simd.h"
#include "ops/passes/fuse_compiled.h"
#include "ops/passes/plan.h"

namespace gg {

// Which groups run as an epilogue: those with a transcendental member (erf, exp, tanh,
// log), whose cost is computing rather than moving values (the GELU after the MLP's first
// layer). Groups that only move values (layer norms, bias adds) gain nothing: the product's
// result stays in cache between the steps anyway. The measurements behind this choice are in
// docs/speed-history.md.
namespace {
bool epilogue_worth(const FusedGroup& grp) {
  return std::any_of(grp.program.begin(), grp.program.end(), [](const FusedInstr& f) { return transcendental(f.op); });
}

}  // namespace

// A fused group G runs as the epilogue of the matrix product P (ExecutorOptions::epilogue)
// when P is one tall GEMM (ops/primitives/matmul.cpp: B a matrix, A not transposed) with rows of N
// values, a whole number of registers; G reads P's value as it is, row for row (a row group
// over rows of N, or a flat one over all of it); nothing but G's own members, views and
// leaves lies between P and G's root in the order; and G reads nothing made after P.
// Neither is in a chain. G then runs on each block of P's rows once the block is final,
// while P still reads its operands for other rows: plan_memory keeps P's operands alive
// until G's place, so G's values never land on them; everything else G writes is placed at
// G's place as before, after nothing but P ran.
Plan plan_epilogues(Plan p, const ExecutorOptions& o) {
  const Graph& g = p.g();
  p.epilogue_for.assign(std::size_t(g.size()), -1);
  if (!o.epilogue || p.fusion.groups.empty()) return p;
  std::vector<char> in_chain(p.order.size(), 0);
  for (const ChainSpan& c : p.chains)
    for (std::size_t s = c.first; s <= c.last; ++s) in_chain[s] = 1;
  auto source = [&](NodeId id) {  // through views
    while (g.node(id).op == OpKind::reshape) id = g.node(id).inputs[0];
    return id;
  };
  for (std::size_t gi = 0; gi < p.fusion.groups.size(); ++gi) {
    const FusedGroup& grp = p.fusion.groups[gi];
    const int sg = p.step_of[std::size_t(grp.root)];
    if (sg < 0 || in_chain[std::size_t(sg)] || !epilogue_worth(grp)) continue;
    int sm = sg - 1;  // the step before G's: past G's members, views and leaves
    for (; sm >= 0; --sm) {
      const Node& n = g.node(p.order[std::size_t(sm)]);
      if (p.group_at(p.order[std::size_t(sm)]) != int(gi) && n.op != OpKind::reshape && !op_bound_leaf(n.op)) break;
    }
    if (sm < 0 || in_chain[std::size_t(sm)]) continue;
    const NodeId mm = p.order[std::size_t(sm)];
    const Node& m = g.node(mm);
    if (m.op != OpKind::matmul || m.dtype != DType::f32 || m.attrs.trans_a || p.in_place[std::size_t(mm)].to >= 0 ||
        g.node(m.inputs[1]).shape.size() != 2 || p.epilogue_for[std::size_t(mm)] >= 0)
      continue;
    const std::int64_t N = m.shape.back(), rows = N > 0 ? numel(m.shape) / N : 0;
    if (rows <= 0) continue;
    const Shape& out = g.node(grp.root).shape;
    std::int64_t group_rows = 1;
    for (std::int64_t d : grp.lead) group_rows *= d;
    // Rows of whole registers: a block of rows then splits into SIMD and scalar work as the
    // whole product's rows do (run_fused).
    const bool fits = N % std::int64_t(simd::width) == 0 &&
                      (grp.flat ? numel(out) == rows * N : grp.n == N && group_rows == rows);
    if (!fits) continue;
    bool reads_product = false, ready = true;
    for (NodeId in : grp.inputs) {
      const NodeId src = source(in);
      if (src == mm) {
        reads_product = true;
        ready = ready && (grp.flat ? numel(g.node(in).shape) == rows * N : g.node(in).shape == out);
      } else if (!op_bound_leaf(g.node(src).op) && p.step_of[std::size_t(src)] >= sm) {
        ready = false;  // made after P
      }
    }
    if (reads_product && ready) p.epilogue_for[std::size_t(mm)] = grp.root;
  }
  return p;
}

}  // namespace gg
