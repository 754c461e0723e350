// The in-place pass: the permutes of attention's head split and merge that the chains'
// products read or write in place, so that they are not run (ExecutorOptions::in_place).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/passes/plan.h"

namespace gg {

// The head split and merge of attention are permutes between (B, T, H, hd) and
// (B, H, T, hd), and the chains' products read or make the (B, H, T, hd) side: a slice
// (b, h) of it is a (T, hd) matrix whose rows are H * hd apart on the other side. A
// permute P of X whose every reader is a product in a chain with leads L, P's shape L + (R,
// C) and its last axis X's last, is not run: the products read their slices from X with X's
// strides. A chain's product whose only reader is a permute Q, outside the chains, with the
// last axis kept last, writes its slices straight into Q's output, and Q is not run. The
// products get the same operands and sum the same terms in the same order, so no value
// changes; a run that goes step by step (anomaly mode) runs the permutes.
Plan plan_in_place(Plan p, const ExecutorOptions& o) {
  const Graph& g = p.g();
  const std::size_t N = std::size_t(g.size());
  p.in_place.assign(N, {});
  p.in_place_step.assign(N, 0);
  if (p.chains.empty() || !o.in_place) return p;
  std::vector<char> kept(N, 0);  // read after the steps, or checked: needs its own value
  for (NodeId id : p.read_after_steps()) kept[std::size_t(id)] = 1;
  for (const Graph::Check& ck : g.checks()) kept[std::size_t(ck.node)] = 1;
  // The step each node is computed at: a group member's at its root (whose step reads it).
  auto step_node = [&](NodeId id) {
    const int gi = p.group_at(id);
    return gi >= 0 ? p.fusion.groups[std::size_t(gi)].root : id;
  };
  std::vector<std::vector<NodeId>> readers(N);  // the step nodes that read each node
  for (NodeId id : p.order)
    for (NodeId in : g.node(id).inputs) readers[std::size_t(in)].push_back(step_node(id));
  std::vector<int> chain_of(N, -1);  // per step node inside a chain: the chain
  for (std::size_t ci = 0; ci < p.chains.size(); ++ci)
    for (std::size_t s = p.chains[ci].first; s <= p.chains[ci].last; ++s) chain_of[std::size_t(p.order[s])] = int(ci);
  auto product_in_chain = [&](NodeId id) {
    return chain_of[std::size_t(id)] >= 0 && p.group_at(id) < 0 && g.node(id).op == OpKind::matmul;
  };
  auto lead_rank = [&](NodeId id) { return p.chains[std::size_t(chain_of[std::size_t(id)])].lead.size(); };
  auto plain_permute = [&](NodeId id) {
    const Node& n = g.node(id);
    return n.op == OpKind::permute && n.dtype == DType::f32 && p.group_at(id) < 0 && chain_of[std::size_t(id)] < 0 &&
           !kept[std::size_t(id)] && p.local_off[std::size_t(id)] < 0;
  };
  // Results written into the permute that reads them.
  for (std::size_t s = 0; s < p.order.size(); ++s) {
    const NodeId id = p.order[s];
    if (!product_in_chain(id) || kept[std::size_t(id)] || p.local_off[std::size_t(id)] >= 0) continue;
    if (readers[std::size_t(id)].size() != 1) continue;
    const NodeId q = readers[std::size_t(id)][0];
    if (!plain_permute(q)) continue;
    const Shape& perm = g.node(q).attrs.dims;
    const Shape ost = strides_of(g.node(q).shape);
    std::vector<std::int64_t> axis(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) axis[std::size_t(perm[i])] = ost[i];
    if (axis.size() != lead_rank(id) + 2 || axis.back() != 1) continue;
    p.in_place[std::size_t(id)] = {q, true, std::move(axis)};
    p.in_place_step[std::size_t(q)] = 1;
  }
  // Operands read from the permute's input.
  for (NodeId id : p.order) {
    if (!plain_permute(id) || p.in_place_step[std::size_t(id)] || readers[std::size_t(id)].empty()) continue;
    const Node& n = g.node(id);
    const NodeId x = n.inputs[0];
    // X needs storage of its own to read from, bound before the chain runs.
    if (p.in_place[std::size_t(x)].to >= 0 || p.local_off[std::size_t(x)] >= 0 || p.never_stored(x) ||
        g.node(x).dtype != DType::f32)
      continue;
    const Shape xst = strides_of(g.node(x).shape);
    std::vector<std::int64_t> axis(n.attrs.dims.size());
    for (std::size_t i = 0; i < axis.size(); ++i) axis[i] = xst[std::size_t(n.attrs.dims[i])];
    const bool all_products = std::all_of(readers[std::size_t(id)].begin(), readers[std::size_t(id)].end(),
                                          [&](NodeId r) { return product_in_chain(r) && axis.size() == lead_rank(r) + 2; });
    if (!all_products || axis.back() != 1) continue;
    p.in_place[std::size_t(id)] = {x, false, std::move(axis)};
    p.in_place_step[std::size_t(id)] = 1;
  }
  return p;
}

}  // namespace gg
