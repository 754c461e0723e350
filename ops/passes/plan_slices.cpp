// The batch-slice pass: chains of steps run one batch slice at a time (ExecutorOptions::slice),
// the values only one slice's pass reads (kept in per-thread scratch), and the chains'
// per-slice views, masked products and groups once the steps exist.
#include "ops/runtime/executor.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "ops/passes/masked.h"
#include "ops/passes/plan_util.h"
#include "ops/cpu/simd.h"

namespace gg {

std::size_t Executor::chain_local_values() const {
  return std::size_t(std::count_if(local_off_.begin(), local_off_.end(), [](std::int64_t o) { return o >= 0; }));
}

std::size_t Executor::masked_products() const {
  std::size_t k = 0;
  for (const SliceChain& c : chains_)
    for (const SliceStep& ss : c.steps) k += ss.masked != nullptr;
  return k;
}

std::size_t Executor::masked_groups() const {
  std::size_t k = 0;
  for (const SliceChain& c : chains_)
    for (const SliceStep& ss : c.steps) k += ss.rows != nullptr;
  return k;
}

void Executor::leaves_first() {
  // Leaves (inputs, parameters, constants) exist before any step runs: listed first, a step
  // moved ahead of a chain below never comes before a leaf it reads.
  std::vector<std::size_t> perm(order_.size());
  for (std::size_t s = 0; s < perm.size(); ++s) perm[s] = s;
  std::stable_partition(perm.begin(), perm.end(), [&](std::size_t s) { return op_bound_leaf(g_.node(order_[s]).op); });
  std::vector<NodeId> order(order_.size()), user_order(order_.size());
  for (std::size_t s = 0; s < perm.size(); ++s) {
    order[s] = order_[perm[s]];
    user_order[s] = user_order_[perm[s]];
  }
  order_ = std::move(order);
  user_order_ = std::move(user_order);
  number_order();
}

// Whether node id (a step: a group's root, or an op) can run one slice of L at a time;
// inside: the nodes already in the chain, whose values are read slice by slice.
bool Executor::sliceable(NodeId id, const Shape& L, const std::vector<char>& inside) const {
  const std::int64_t W = std::int64_t(simd::width);
  const Node& n = g_.node(id);
  const std::int64_t C = numel(L);
  std::vector<std::int64_t> stride;
  const int gi = group_at(id);
  if (gi >= 0) {
    const FusedGroup& grp = fusion_.groups[std::size_t(gi)];
    for (NodeId in : grp.inputs)
      if (inside[std::size_t(in)] && !starts_with(g_.node(in).shape, L)) return false;
    if (grp.flat) {
      if (!starts_with(n.shape, L) || (numel(n.shape) / C) % W != 0) return false;
      for (NodeId in : grp.inputs)
        if (g_.node(in).shape != n.shape && numel(g_.node(in).shape) != 1) return false;
      return true;
    }
    if (grp.lead.size() <= L.size() || !std::equal(L.begin(), L.end(), grp.lead.begin())) return false;
    std::int64_t rows = 1;
    for (std::size_t d = L.size(); d < grp.lead.size(); ++d) rows *= grp.lead[d];
    return rows % W == 0;
  }
  if (!starts_with(n.shape, L)) return false;
  for (NodeId in : n.inputs) {
    const Shape& si = g_.node(in).shape;
    if (!lead_strides(si, n.shape.size(), L, stride)) return false;
    if (inside[std::size_t(in)] && !starts_with(si, L)) return false;
  }
  if (n.op == OpKind::matmul) {
    for (NodeId in : n.inputs)
      if (g_.node(in).shape.size() != L.size() + 2 || !starts_with(g_.node(in).shape, L)) return false;
    return n.shape.size() == L.size() + 2;
  }
  if (op_elementwise(n.op)) return (numel(n.shape) / C) % W == 0;
  if (n.op == OpKind::sum || n.op == OpKind::max) return n.attrs.axis >= std::int64_t(L.size());
  if (n.op == OpKind::reshape) return starts_with(g_.node(n.inputs[0]).shape, L);
  return false;
}

// Chains: from a batched matmul (both operands batched over the same dims L, at least two
// batches), as many following steps as can run one L-slice at a time: batched matmuls over
// L, fused groups whose rows start with L, element-wise ops and reductions over later axes
// (inputs from outside the chain may broadcast over L, values made inside it are read
// slice by slice), and reshapes that keep L. A slice of a step computes exactly what the
// step computes for those rows, so the values do not change: each slice's row blocks start
// on a register boundary (rows or values per slice a multiple of the SIMD width), and
// every kernel on a slice is the whole-tensor kernel on a view.
void Executor::plan_slices() {
  if (!options_.slice) return;
  leaves_first();
  std::vector<std::size_t> pos;  // positions of the step nodes in order_
  for (std::size_t s = 0; s < order_.size(); ++s) {
    const NodeId id = order_[s];
    const int gi = group_at(id);
    if (op_bound_leaf(g_.node(id).op) || (gi >= 0 && fusion_.groups[std::size_t(gi)].root != id)) continue;
    pos.push_back(s);
  }
  std::vector<char> inside(std::size_t(g_.size()), 0);
  auto mark = [&](NodeId id) {
    inside[std::size_t(id)] = 1;
    const int gi = group_at(id);
    if (gi >= 0)
      for (NodeId m : fusion_.groups[std::size_t(gi)].stored) inside[std::size_t(m)] = 1;
  };
  for (std::size_t k = 0; k < pos.size(); ++k) {
    const Node& n = g_.node(order_[pos[k]]);
    const int gi = group_at(order_[pos[k]]);
    if (gi >= 0 || n.op != OpKind::matmul || n.shape.size() < 3) continue;
    const Shape L(n.shape.begin(), n.shape.end() - 2);
    if (numel(L) < 2 || !sliceable(order_[pos[k]], L, inside)) continue;
    std::size_t j = k, compute = 0;
    for (; j < pos.size(); ++j) {
      const Node& nj = g_.node(order_[pos[j]]);
      // reads only leaves (a constant mask's reshape), which exist before any step runs
      const bool outside = group_at(order_[pos[j]]) < 0 && !nj.inputs.empty() &&
                           std::all_of(nj.inputs.begin(), nj.inputs.end(), [&](NodeId in) { return op_bound_leaf(g_.node(in).op); });
      if (j > k && (nj.op == OpKind::random || (outside && !sliceable(order_[pos[j]], L, inside)))) {
        // A step that reads nothing the chain makes (a dropout mask's draw; a reshape of a
        // constant mask) moves to just before the chain, so that it does not cut it. Draws
        // keep their order among themselves, and so the numbers.
        std::rotate(order_.begin() + std::ptrdiff_t(pos[k]), order_.begin() + std::ptrdiff_t(pos[j]),
                    order_.begin() + std::ptrdiff_t(pos[j]) + 1);
        std::rotate(user_order_.begin() + std::ptrdiff_t(pos[k]), user_order_.begin() + std::ptrdiff_t(pos[j]),
                    user_order_.begin() + std::ptrdiff_t(pos[j]) + 1);
        for (std::size_t q = j; q > k; --q) pos[q] = pos[q - 1] + 1;
        ++k;  // the chain now starts one step later; pos[k - 1] is the moved step
        number_order();
        continue;
      }
      if (!sliceable(order_[pos[j]], L, inside)) break;
      mark(order_[pos[j]]);
      if (g_.node(order_[pos[j]]).op != OpKind::reshape) ++compute;
    }
    std::fill(inside.begin(), inside.end(), 0);
    if (compute >= 2) {
      SliceChain c;
      c.first = pos[k];
      c.last = pos[j - 1];
      c.lead = L;
      c.slices = numel(L);
      chains_.push_back(std::move(c));
    }
    k = j - 1;
  }
}

// Values a chain makes and only its own steps read, none by a view (reshape) and none an
// output or checked, are read by the same slice's pass that made them: each thread keeps
// them for the slice it runs in a scratch block that stays in cache, and they take no
// place in the arena (the attention chains' (T, T) scores, weights and their gradients).
void Executor::plan_locals() {
  local_off_.assign(std::size_t(g_.size()), -1);
  if (chains_.empty()) return;
  std::vector<char> kept(std::size_t(g_.size()), 0);
  for (NodeId id : read_after_steps()) kept[std::size_t(id)] = 1;
  auto made_at = [&](NodeId id) {  // where a value is computed: a group member's at its root
    const int gi = group_at(id);
    return step_of_[std::size_t(gi >= 0 ? fusion_.groups[std::size_t(gi)].root : id)];
  };
  std::vector<std::vector<NodeId>> readers(std::size_t(g_.size()));
  for (NodeId id : order_)
    for (NodeId in : g_.node(id).inputs) readers[std::size_t(in)].push_back(id);
  for (SliceChain& c : chains_) {
    const int first = int(c.first), last = int(c.last);
    for (std::size_t s = c.first; s <= c.last; ++s) {
      const NodeId id = order_[s];
      const Node& n = g_.node(id);
      if (op_bound_leaf(n.op) || n.op == OpKind::reshape || n.dtype != DType::f32 || never_stored(id) ||
          kept[std::size_t(id)] || !starts_with(n.shape, c.lead) || readers[std::size_t(id)].empty())
        continue;
      const int at = made_at(id);
      if (at < first || at > last) continue;
      const bool inside_only = std::all_of(readers[std::size_t(id)].begin(), readers[std::size_t(id)].end(), [&](NodeId r) {
        const int p = made_at(r);
        return p >= first && p <= last && g_.node(r).op != OpKind::reshape;
      });
      if (!inside_only) continue;
      local_off_[std::size_t(id)] = std::int64_t(c.scratch_bytes);
      c.scratch_bytes += round64(std::size_t(numel(n.shape) / c.slices) * 4);
    }
  }
}

// The chains' steps: indices into steps_, and each step's per-slice views.
void Executor::bind_slices(const std::vector<int>& step_at) {
  chain_at_.assign(steps_.size(), -1);
  if (chains_.empty()) return;
  // Per node: how a product may skip a mask's zeros; per group: the rows' parts to compute.
  MaskedPlan masked;
  if (options_.masked) masked = find_masked(g_, order_, read_after_steps(), fusion_);
  for (std::size_t ci = 0; ci < chains_.size(); ++ci) {
    SliceChain& c = chains_[ci];
    c.first = std::size_t(step_at[std::size_t(order_[c.first])]);
    c.last = std::size_t(step_at[std::size_t(order_[c.last])]);
    chain_at_[c.first] = int(ci);
    for (std::size_t t = c.first; t <= c.last; ++t) {
      const Step& st = steps_[t];
      const Node& n = g_.node(st.id);
      SliceStep ss;
      if (st.group >= 0) {
        ss.extent = fused_extent(fusion_.groups[std::size_t(st.group)], st.out) / c.slices;
        if (!masked.rows.empty()) ss.rows = masked.rows[std::size_t(st.group)];
      } else {
        auto sliced = [&](Shape s) {  // the L dims (as aligned to the output) set to 1
          const std::size_t r = n.shape.size();
          for (std::size_t d = 0; d < c.lead.size(); ++d)
            if (const std::ptrdiff_t od = std::ptrdiff_t(d) - std::ptrdiff_t(r) + std::ptrdiff_t(s.size()); od >= 0)
              s[std::size_t(od)] = 1;
          return s;
        };
        for (NodeId in : n.inputs) {
          std::vector<std::int64_t> stride;
          GG_CHECK(lead_strides(g_.node(in).shape, n.shape.size(), c.lead, stride));
          ss.in_stride.push_back(std::move(stride));
          ss.in_shape.push_back(sliced(g_.node(in).shape));
        }
        ss.out_shape = sliced(n.shape);
        ss.out_elems = numel(n.shape) / c.slices;
        const std::size_t l = c.lead.size();
        ss.in_from.assign(n.inputs.size(), -1);
        SliceStrides ld;
        std::int64_t* in_ld[2] = {&ld.a, &ld.b};
        for (std::size_t j = 0; j < n.inputs.size() && n.op == OpKind::matmul; ++j)
          if (const InPlace& ip = in_place_[std::size_t(n.inputs[j])]; ip.to >= 0 && !ip.writes) {
            ss.in_from[j] = ip.to;
            ss.in_stride[j].assign(ip.axis_stride.begin(), ip.axis_stride.begin() + std::ptrdiff_t(l));
            *in_ld[j] = ip.axis_stride[l];
            ss.strided = true;
          }
        if (const InPlace& ip = in_place_[std::size_t(st.id)]; ip.writes) {
          ss.out_to = ip.to;
          ss.out_stride.assign(ip.axis_stride.begin(), ip.axis_stride.begin() + std::ptrdiff_t(l));
          ld.c = ip.axis_stride[l];
          ss.strided = true;
        }
        ss.ld_a = ld.a, ss.ld_b = ld.b, ss.ld_c = ld.c;
        if (!masked.products.empty() && masked.products[std::size_t(st.id)].kind != MaskedProduct::none)
          ss.masked = std::make_shared<const MaskedBlocks>(masked_blocks(g_, n, masked.products[std::size_t(st.id)]));
      }
      for (NodeId in : reads(st)) ss.in_local.push_back(local_off_[std::size_t(in)]);
      ss.out_local = local_off_[std::size_t(st.id)];
      if (st.group >= 0)
        for (NodeId m : fusion_.groups[std::size_t(st.group)].stored) ss.stored_local.push_back(local_off_[std::size_t(m)]);
      ss.any_local = ss.out_local >= 0 || std::any_of(ss.in_local.begin(), ss.in_local.end(), [](std::int64_t o) { return o >= 0; }) ||
                     std::any_of(ss.stored_local.begin(), ss.stored_local.end(), [](std::int64_t o) { return o >= 0; });
      c.steps.push_back(std::move(ss));
    }
  }
}

}  // namespace gg
