// Binding a plan (ops/passes/plan.h) to this executor's memory and steps: the arena and the
// views, the chains' per-slice views, the products' epilogues, and full-size storage for the
// chains' local values when a run goes step by step; and the counts of the passes' work.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ops/passes/masked.h"
#include "ops/passes/plan.h"
#include "ops/passes/plan_util.h"
#include "ops/runtime/executor.h"

namespace gg {

std::size_t Executor::chain_local_values() const {
  return std::size_t(std::count_if(plan_->local_off.begin(), plan_->local_off.end(), [](std::int64_t o) { return o >= 0; }));
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

std::size_t Executor::in_place_permutes() const {
  return std::size_t(std::count(plan_->in_place_step.begin(), plan_->in_place_step.end(), 1));
}

std::size_t Executor::epilogue_groups() const {
  return std::size_t(std::count(by_epilogue_.begin(), by_epilogue_.end(), 1));
}

// The arena, and the views: where each planned node's value lives (the arena, the node's constant data, an
// input buffer, or a parameter bound at each run).
void Executor::bind_memory() {
  const Plan& p = *plan_;
  const std::size_t N = std::size_t(g_.size());
  views_.assign(N, View{});
  kept_.assign(N, 0);
  inputs_.resize(N);
  input_fed_.assign(N, 0);
  for (NodeId o : p.outputs) kept_[std::size_t(o)] = 1;
  arena_.reset(aligned_alloc_large(p.arena_bytes));
  std::memset(arena_.get(), 0, std::max<std::size_t>(p.arena_bytes, 1));
  char* base = static_cast<char*>(arena_.get());
  for (NodeId id : p.order) {
    const Node& n = g_.node(id);
    View& v = views_[std::size_t(id)];
    v.shape = &n.shape;
    v.dtype = n.dtype;
    if (n.op == OpKind::input) {
      inputs_[std::size_t(id)] = Tensor(n.shape, n.dtype);
      v.data = inputs_[std::size_t(id)].data();
      kept_[std::size_t(id)] = 1;
    } else if (n.op == OpKind::constant) {
      v.data = const_cast<float*>(n.attrs.data->data());  // i32 constants are converted below
      if (n.dtype == DType::i32) {
        Tensor t(n.shape, DType::i32);
        for (std::int64_t i = 0; i < t.numel(); ++i) t.i()[i] = std::int32_t((*n.attrs.data)[std::size_t(i)]);
        inputs_[std::size_t(id)] = std::move(t);
        v.data = inputs_[std::size_t(id)].data();
      }
      kept_[std::size_t(id)] = 1;
    } else if (n.op == OpKind::param) {
      kept_[std::size_t(id)] = 1;  // bound at each run
    } else if (p.root[std::size_t(id)] != id) {
      v.data = views_[std::size_t(p.root[std::size_t(id)])].data;  // a view: the reshape kernel copies nothing
    } else if (p.off_arena(id)) {
      v.data = nullptr;  // inside a fused group, in a chain's scratch, or read or written in place: no place of its own
    } else {
      v.data = base + p.offset[std::size_t(id)];
    }
  }
}

// The chains' steps: indices into steps_, and each step's per-slice views.
void Executor::bind_slices(const std::vector<int>& step_at) {
  chain_at_.assign(steps_.size(), -1);
  for (const ChainSpan& span : plan_->chains)
    chains_.push_back({std::size_t(step_at[std::size_t(plan_->order[span.first])]),
                       std::size_t(step_at[std::size_t(plan_->order[span.last])]), span.lead, span.slices, {},
                       span.scratch_bytes});
  const Plan& p = *plan_;
  const MaskedPlan& masked = p.masked;
  for (std::size_t ci = 0; ci < chains_.size(); ++ci) {
    SliceChain& c = chains_[ci];
    chain_at_[c.first] = int(ci);
    for (std::size_t t = c.first; t <= c.last; ++t) c.all_steps.push_back(std::uint32_t(t));
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
          if (const InPlace& ip = p.in_place[std::size_t(n.inputs[j])]; ip.to >= 0 && !ip.writes) {
            ss.in_from[j] = ip.to;
            ss.in_stride[j].assign(ip.axis_stride.begin(), ip.axis_stride.begin() + std::ptrdiff_t(l));
            *in_ld[j] = ip.axis_stride[l];
            ss.strided = true;
          }
        if (const InPlace& ip = p.in_place[std::size_t(st.id)]; ip.writes) {
          ss.out_to = ip.to;
          ss.out_stride.assign(ip.axis_stride.begin(), ip.axis_stride.begin() + std::ptrdiff_t(l));
          ld.c = ip.axis_stride[l];
          ss.strided = true;
        }
        ss.ld_a = ld.a, ss.ld_b = ld.b, ss.ld_c = ld.c;
        if (!masked.products.empty() && masked.products[std::size_t(st.id)].kind != MaskedProduct::none)
          ss.masked = std::make_shared<const MaskedBlocks>(masked_blocks(g_, n, masked.products[std::size_t(st.id)]));
      }
      for (NodeId in : reads(st)) ss.in_local.push_back(p.local_off[std::size_t(in)]);
      ss.out_local = p.local_off[std::size_t(st.id)];
      if (st.group >= 0)
        for (NodeId m : fusion_.groups[std::size_t(st.group)].stored) ss.stored_local.push_back(p.local_off[std::size_t(m)]);
      ss.any_local = ss.out_local >= 0 || std::any_of(ss.in_local.begin(), ss.in_local.end(), [](std::int64_t o) { return o >= 0; }) ||
                     std::any_of(ss.stored_local.begin(), ss.stored_local.end(), [](std::int64_t o) { return o >= 0; });
      c.steps.push_back(std::move(ss));
    }
  }
}

// Full-size storage for the chains' local values and the in-place ones, for runs that go
// step by step.
void Executor::bind_locals_unsliced() {
  auto own = [&](NodeId id) { return plan_->local_off[std::size_t(id)] >= 0 || plan_->in_place[std::size_t(id)].to >= 0; };
  std::size_t bytes = 0;
  for (NodeId id : plan_->order)
    if (own(id)) bytes += round64(std::size_t(numel(g_.node(id).shape)) * 4);
  if (bytes == 0 || local_full_) return;
  local_full_.reset(aligned_alloc64(bytes));
  char* p = static_cast<char*>(local_full_.get());
  for (NodeId id : plan_->order)
    if (own(id)) {
      views_[std::size_t(id)].data = p;
      p += round64(std::size_t(numel(g_.node(id).shape)) * 4);
    }
  for (Step& st : steps_) {
    st.out.data = views_[std::size_t(st.id)].data;
    if (st.group >= 0)
      for (std::size_t k = 0; k < st.stored.size(); ++k)
        st.stored[k].data = views_[std::size_t(fusion_.groups[std::size_t(st.group)].stored[k])].data;
  }
}

// Per step: the epilogue group's step of a product, and whether a group's step is run by
// its product.
void Executor::bind_epilogues(const std::vector<int>& step_at) {
  epilogue_step_.assign(steps_.size(), -1);
  by_epilogue_.assign(steps_.size(), 0);
  for (std::size_t t = 0; t < steps_.size(); ++t)
    if (const NodeId r = plan_->epilogue_for[std::size_t(steps_[t].id)]; r >= 0) {
      epilogue_step_[t] = step_at[std::size_t(r)];
      by_epilogue_[std::size_t(step_at[std::size_t(r)])] = 1;
    }
}

}  // namespace gg
