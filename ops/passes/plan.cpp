// The pipeline of planning passes: the first plan, fusion and masked products (small
// enough to live here), the passes' list and make_plan. The other passes have a file each
// (plan_slices.cpp, plan_in_place.cpp, plan_epilogues.cpp, plan_memory.cpp).
#include "ops/passes/plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "ops/passes/remat.h"

namespace gg {

bool Plan::never_stored(NodeId id) const {
  const int gi = group_at(id);
  if (gi < 0) return false;
  const FusedGroup& grp = fusion.groups[std::size_t(gi)];
  return grp.root != id && std::find(grp.stored.begin(), grp.stored.end(), id) == grp.stored.end();
}

bool Plan::off_arena(NodeId id) const {
  return never_stored(id) || (!local_off.empty() && local_off[std::size_t(id)] >= 0) ||
         (!in_place.empty() && in_place[std::size_t(id)].to >= 0);
}

std::vector<NodeId> Plan::read_after_steps() const {
  std::vector<NodeId> ids = outputs;
  for (const Graph::Check& c : g().checks()) ids.push_back(c.node);
  return ids;
}

NodeId Plan::planned_id(NodeId given_id) const {
  return given_id < 0 || std::size_t(given_id) >= simplified.map.size() ? NodeId(-1)
                                                                         : simplified.map[std::size_t(given_id)];
}

void Plan::number_order() {
  step_of.assign(std::size_t(g().size()), -1);
  for (std::size_t s = 0; s < order.size(); ++s) step_of[std::size_t(order[s])] = int(s);
}

Plan plan_start(const Graph& g, const std::vector<NodeId>& outputs, const ExecutorOptions& options) {
  for (NodeId o : outputs)
    if (o < 0 || o >= g.size())
      throw GraphError(fmt::format("Executor: output %{} is not a node of this graph (it has {} nodes); was it built "
                                   "in another graph?", o, g.size()));
  Plan p;
  p.given = &g;
  p.rewritten = options.simplify || options.remat;
  Simplified& s = p.simplified;
  if (options.simplify) {
    s = gg::simplify(g, outputs, {.keep_stop_gradient = false});
  } else {
    s.map.resize(std::size_t(g.size()));
    for (NodeId i = 0; i < g.size(); ++i) s.map[std::size_t(i)] = i;
    s.roots = outputs;
  }
  if (options.remat) {  // then the copies: the map goes through both passes
    Rematerialized r = gg::rematerialize(options.simplify ? s.graph : g, s.roots);
    for (NodeId& m : s.map)
      if (m >= 0) m = r.map[std::size_t(m)];
    s.graph = std::move(r.graph);
    s.roots = std::move(r.roots);
  }
  p.outputs = s.roots;
  p.order = ancestors(p.g(), p.outputs);
  p.number_order();
  // Per position: the first node of the graph given that it computes.
  p.user_order.assign(p.order.size(), -1);
  for (NodeId id = 0; id < g.size(); ++id)
    if (const NodeId q = s.map[std::size_t(id)]; q >= 0) {
      const int step = p.step_of[std::size_t(q)];  // -1: a node the outputs do not need
      if (step >= 0 && p.user_order[std::size_t(step)] < 0) p.user_order[std::size_t(step)] = id;
    }
  const std::size_t N = std::size_t(p.g().size());
  p.local_off.assign(N, -1);
  p.in_place.assign(N, {});
  p.in_place_step.assign(N, 0);
  p.epilogue_for.assign(N, -1);
  return p;
}

Plan plan_fusion(Plan p, const ExecutorOptions& options) {
  if (options.fuse) p.fusion = fuse_elementwise(p.g(), p.order, p.read_after_steps(), options.compiled);
  return p;
}

// Only inside chains: a product there runs on row blocks of one slice (the runtime's
// slice_matmul), and the groups between them on the rows of one slice.
Plan plan_masked(Plan p, const ExecutorOptions& options) {
  if (options.masked && !p.chains.empty()) p.masked = find_masked(p.g(), p.order, p.read_after_steps(), p.fusion);
  return p;
}

const std::vector<PlanPass>& plan_passes() {
  static const std::vector<PlanPass> passes = {{"fuse", plan_fusion},         {"slice", plan_slices},
                                               {"locals", plan_locals},       {"in-place", plan_in_place},
                                               {"masked", plan_masked},       {"epilogue", plan_epilogues},
                                               {"memory", plan_memory}};
  return passes;
}

Plan make_plan(const Graph& g, const std::vector<NodeId>& outputs, const ExecutorOptions& options) {
  Plan p = plan_start(g, outputs, options);
  for (const PlanPass& pass : plan_passes()) p = pass.run(std::move(p), options);
  return p;
}

}  // namespace gg
