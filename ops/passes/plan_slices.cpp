// The batch-slice passes: chains of steps run one batch slice at a time (ExecutorOptions::slice)
// and the values only one slice's pass reads, kept in per-thread scratch (plan_locals).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/cpu/simd.h"
#include "ops/passes/plan.h"
#include "ops/passes/plan_util.h"

namespace gg {

namespace {

void leaves_first(Plan& p) {
  const Graph& g = p.g();
  // Leaves (inputs, parameters, constants) exist before any step runs: listed first, a step
  // moved ahead of a chain below never comes before a leaf it reads.
  std::vector<std::size_t> perm(p.order.size());
  for (std::size_t s = 0; s < perm.size(); ++s) perm[s] = s;
  std::stable_partition(perm.begin(), perm.end(), [&](std::size_t s) { return op_bound_leaf(g.node(p.order[s]).op); });
  std::vector<NodeId> order(p.order.size()), user_order(p.order.size());
  for (std::size_t s = 0; s < perm.size(); ++s) {
    order[s] = p.order[perm[s]];
    user_order[s] = p.user_order[perm[s]];
  }
  p.order = std::move(order);
  p.user_order = std::move(user_order);
  p.number_order();
}

// Whether node id (a step: a group's root, or an op) can run one slice of L at a time;
// inside: the nodes already in the chain, whose values are read slice by slice.
bool sliceable(const Plan& p, NodeId id, const Shape& L, const std::vector<char>& inside) {
  const Graph& g = p.g();
  const std::int64_t W = std::int64_t(simd::width);
  const Node& n = g.node(id);
  const std::int64_t C = numel(L);
  std::vector<std::int64_t> stride;
  const int gi = p.group_at(id);
  if (gi >= 0) {
    const FusedGroup& grp = p.fusion.groups[std::size_t(gi)];
    for (NodeId in : grp.inputs)
      if (inside[std::size_t(in)] && !starts_with(g.node(in).shape, L)) return false;
    if (grp.flat) {
      if (!starts_with(n.shape, L) || (numel(n.shape) / C) % W != 0) return false;
      for (NodeId in : grp.inputs)
        if (g.node(in).shape != n.shape && numel(g.node(in).shape) != 1) return false;
      return true;
    }
    if (grp.lead.size() <= L.size() || !std::equal(L.begin(), L.end(), grp.lead.begin())) return false;
    std::int64_t rows = 1;
    for (std::size_t d = L.size(); d < grp.lead.size(); ++d) rows *= grp.lead[d];
    return rows % W == 0;
  }
  if (!starts_with(n.shape, L)) return false;
  for (NodeId in : n.inputs) {
    const Shape& si = g.node(in).shape;
    if (!lead_strides(si, n.shape.size(), L, stride)) return false;
    if (inside[std::size_t(in)] && !starts_with(si, L)) return false;
  }
  if (n.op == OpKind::matmul) {
    for (NodeId in : n.inputs)
      if (g.node(in).shape.size() != L.size() + 2 || !starts_with(g.node(in).shape, L)) return false;
    return n.shape.size() == L.size() + 2;
  }
  if (op_elementwise(n.op)) return (numel(n.shape) / C) % W == 0;
  if (n.op == OpKind::sum || n.op == OpKind::max) return n.attrs.axis >= std::int64_t(L.size());
  if (n.op == OpKind::reshape) return starts_with(g.node(n.inputs[0]).shape, L);
  return false;
}

}  // namespace

// Chains: from a batched matmul (both operands batched over the same dims L, at least two
// batches), as many following steps as can run one L-slice at a time: batched matmuls over
// L, fused groups whose rows start with L, element-wise ops and reductions over later axes
// (inputs from outside the chain may broadcast over L, values made inside it are read
// slice by slice), and reshapes that keep L. A slice of a step computes exactly what the
// step computes for those rows, so the values do not change: each slice's row blocks start
// on a register boundary (rows or values per slice a multiple of the SIMD width), and
// every kernel on a slice is the whole-tensor kernel on a view.
Plan plan_slices(Plan p, const ExecutorOptions& o) {
  if (!o.slice) return p;
  leaves_first(p);
  const Graph& g = p.g();
  std::vector<std::size_t> pos;  // positions of the step nodes in p.order
  for (std::size_t s = 0; s < p.order.size(); ++s) {
    const NodeId id = p.order[s];
    const int gi = p.group_at(id);
    if (op_bound_leaf(g.node(id).op) || (gi >= 0 && p.fusion.groups[std::size_t(gi)].root != id)) continue;
    pos.push_back(s);
  }
  std::vector<char> inside(std::size_t(g.size()), 0);
  auto mark = [&](NodeId id) {
    inside[std::size_t(id)] = 1;
    const int gi = p.group_at(id);
    if (gi >= 0)
      for (NodeId m : p.fusion.groups[std::size_t(gi)].stored) inside[std::size_t(m)] = 1;
  };
  for (std::size_t k = 0; k < pos.size(); ++k) {
    const Node& n = g.node(p.order[pos[k]]);
    const int gi = p.group_at(p.order[pos[k]]);
    if (gi >= 0 || n.op != OpKind::matmul || n.shape.size() < 3) continue;
    const Shape L(n.shape.begin(), n.shape.end() - 2);
    if (numel(L) < 2 || !sliceable(p, p.order[pos[k]], L, inside)) continue;
    std::size_t j = k, compute = 0;
    for (; j < pos.size(); ++j) {
      const Node& nj = g.node(p.order[pos[j]]);
      // reads only leaves (a constant mask's reshape), which exist before any step runs
      const bool outside = p.group_at(p.order[pos[j]]) < 0 && !nj.inputs.empty() &&
                           std::all_of(nj.inputs.begin(), nj.inputs.end(), [&](NodeId in) { return op_bound_leaf(g.node(in).op); });
      if (j > k && (nj.op == OpKind::random || (outside && !sliceable(p, p.order[pos[j]], L, inside)))) {
        // A step that reads nothing the chain makes (a dropout mask's draw; a reshape of a
        // constant mask) moves to just before the chain, so that it does not cut it. Draws
        // keep their order among themselves, and so the numbers.
        std::rotate(p.order.begin() + std::ptrdiff_t(pos[k]), p.order.begin() + std::ptrdiff_t(pos[j]),
                    p.order.begin() + std::ptrdiff_t(pos[j]) + 1);
        std::rotate(p.user_order.begin() + std::ptrdiff_t(pos[k]), p.user_order.begin() + std::ptrdiff_t(pos[j]),
                    p.user_order.begin() + std::ptrdiff_t(pos[j]) + 1);
        for (std::size_t q = j; q > k; --q) pos[q] = pos[q - 1] + 1;
        ++k;  // the chain now starts one step later; pos[k - 1] is the moved step
        p.number_order();
        continue;
      }
      if (!sliceable(p, p.order[pos[j]], L, inside)) break;
      mark(p.order[pos[j]]);
      if (g.node(p.order[pos[j]]).op != OpKind::reshape) ++compute;
    }
    std::fill(inside.begin(), inside.end(), 0);
    if (compute >= 2) {
      ChainSpan c;
      c.first = pos[k];
      c.last = pos[j - 1];
      c.lead = L;
      c.slices = numel(L);
      p.chains.push_back(std::move(c));
    }
    k = j - 1;
  }
  return p;
}

// Values a chain makes and only its own steps read, none by a view (reshape) and none an
// output or checked, are read by the same slice's pass that made them: each thread keeps
// them for the slice it runs in a scratch block that stays in cache, and they take no
// place in the arena (the attention chains' (T, T) scores, weights and their gradients).
Plan plan_locals(Plan p, const ExecutorOptions&) {
  const Graph& g = p.g();
  p.local_off.assign(std::size_t(g.size()), -1);
  if (p.chains.empty()) return p;
  std::vector<char> kept(std::size_t(g.size()), 0);
  for (NodeId id : p.read_after_steps()) kept[std::size_t(id)] = 1;
  auto made_at = [&](NodeId id) {  // where a value is computed: a group member's at its root
    const int gi = p.group_at(id);
    return p.step_of[std::size_t(gi >= 0 ? p.fusion.groups[std::size_t(gi)].root : id)];
  };
  std::vector<std::vector<NodeId>> readers(std::size_t(g.size()));
  for (NodeId id : p.order)
    for (NodeId in : g.node(id).inputs) readers[std::size_t(in)].push_back(id);
  for (ChainSpan& c : p.chains) {
    const int first = int(c.first), last = int(c.last);
    for (std::size_t s = c.first; s <= c.last; ++s) {
      const NodeId id = p.order[s];
      const Node& n = g.node(id);
      if (op_bound_leaf(n.op) || n.op == OpKind::reshape || n.dtype != DType::f32 || p.never_stored(id) ||
          kept[std::size_t(id)] || !starts_with(n.shape, c.lead) || readers[std::size_t(id)].empty())
        continue;
      const int at = made_at(id);
      if (at < first || at > last) continue;
      const bool inside_only = std::all_of(readers[std::size_t(id)].begin(), readers[std::size_t(id)].end(), [&](NodeId r) {
        const int at_r = made_at(r);
        return at_r >= first && at_r <= last && g.node(r).op != OpKind::reshape;
      });
      if (!inside_only) continue;
      p.local_off[std::size_t(id)] = std::int64_t(c.scratch_bytes);
      c.scratch_bytes += round64(std::size_t(numel(n.shape) / c.slices) * 4);
    }
  }
  return p;
}

}  // namespace gg
