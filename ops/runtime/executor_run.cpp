// Running a plan: bind the parameters, then the flat loop over the steps; a batch-slice
// chain runs slice-major on the threads, each thread taking whole slices through its steps.
#include "ops/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/passes/masked.h"
#include "ops/passes/plan.h"
#include "ops/cpu/parallel.h"

namespace gg {

// Profiling: each item's wall time, added to its step's and its op kind's (or the fused
// groups', or the chains') totals. Items that only run checks are not timed.
class Executor::Profiler final : public RunObserver {
 public:
  explicit Profiler(Executor& ex) : ex_(ex) {
    ex.step_seconds_.resize(ex.steps_.size(), 0.0);
    ex.chain_step_seconds_.resize(ex.steps_.size(), 0.0);
    ++ex.profiled_runs_;
  }
  void before(const RunItem& it) override {
    if (it.kind != RunItem::checks_only) t0_ = std::chrono::steady_clock::now();
  }
  void after(const RunItem& it) override {
    if (it.kind == RunItem::checks_only) return;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    ex_.step_seconds_[it.step] += dt;
    if (it.kind == RunItem::chain) {
      const SliceChain& c = ex_.chains_[std::size_t(it.other)];
      ex_.sliced_seconds_ += dt;
      ++ex_.sliced_calls_;
      ex_.sliced_steps_ += std::int64_t(c.last - c.first + 1);
      return;
    }
    const Step& st = ex_.steps_[it.step];
    if (st.group >= 0) {
      ex_.fused_seconds_ += dt;
      ++ex_.fused_calls_;
      ex_.fused_members_ += std::int64_t(ex_.fusion_.groups[std::size_t(st.group)].members.size());
    } else {
      const OpKind op = ex_.g_.node(st.id).op;
      ex_.op_seconds_[std::size_t(op)] += dt;
      ++ex_.op_calls_[std::size_t(op)];
    }
  }

 private:
  Executor& ex_;
  std::chrono::steady_clock::time_point t0_{};
};

// Anomaly mode: each computed step's values checked for NaN and Inf right after it.
class Executor::AnomalyCheck final : public RunObserver {
 public:
  explicit AnomalyCheck(const Executor& ex) : ex_(ex) {}
  void after(const RunItem& it) override {
    if (it.kind != RunItem::checks_only && it.kind != RunItem::chain) ex_.check_anomaly(ex_.steps_[it.step]);
  }

 private:
  const Executor& ex_;
};

// watch(): the watched values final after each item, handed to the caller's callback.
class Executor::ReadyNotifier final : public RunObserver {
 public:
  explicit ReadyNotifier(const Executor& ex) : ex_(ex) {}
  void after(const RunItem& it) override {
    if (it.kind != RunItem::chain) return tell(it.step);
    const SliceChain& c = ex_.chains_[std::size_t(it.other)];
    for (std::size_t t = c.first; t <= c.last; ++t) tell(t);
  }

 private:
  void tell(std::size_t step) const {
    for (std::uint32_t i : ex_.watch_at_[step]) ex_.on_ready_(i);
  }
  const Executor& ex_;
};

std::vector<std::size_t> Executor::ready_at(const std::vector<NodeId>& ids) const {
  const std::vector<int> at = step_index();
  std::vector<std::size_t> r;
  for (NodeId user_id : ids) {
    const NodeId id = plan_->planned_id(user_id);
    if (id < 0 || !kept_[std::size_t(id)])
      throw GraphError(fmt::format("node %{} is not an output of this plan; ask for it when building the executor", user_id));
    int s = at[std::size_t(id)];
    if (const int group = plan_->group_at(id); s < 0 && group >= 0) s = at[std::size_t(fusion_.groups[std::size_t(group)].root)];
    if (s >= 0 && steps_[std::size_t(s)].in_place) s = int(steps_.size()) - 1;  // written by a chain in place: at the end
    r.push_back(std::size_t(s + 1));
  }
  return r;
}

void Executor::watch(const std::vector<NodeId>& ids, std::function<void(std::size_t)> on_ready) {
  const std::vector<std::size_t> at = ready_at(ids);
  watch_at_.assign(ids.empty() ? 0 : steps_.size(), {});
  watch_first_.clear();
  watch_last_.clear();
  for (std::size_t i = 0; i < at.size(); ++i) {
    if (at[i] == 0) watch_first_.push_back(std::uint32_t(i));
    else if (steps_[at[i] - 1].in_place) watch_last_.push_back(std::uint32_t(i));
    else watch_at_[at[i] - 1].push_back(std::uint32_t(i));
  }
  on_ready_ = ids.empty() ? nullptr : std::move(on_ready);
}

void Executor::bind_params() {
  // The store may have replaced a tensor since the last run.
  for (NodeId id : plan_->order) {
    const Node& n = g_.node(id);
    if (n.op == OpKind::input && !input_fed_[std::size_t(id)])
      throw GraphError(fmt::format("input '{}' declared at {} was not fed", n.name, site_string(n.loc)));
    if (n.op != OpKind::param) continue;
    if (!params_.has(n.name))
      throw GraphError(fmt::format("parameter '{}' declared at {} has no value", n.name, site_string(n.loc)));
    Tensor& t = params_.at(n.name);
    if (t.shape() != n.shape)
      throw GraphError(fmt::format("parameter '{}' is {} in the store but {} in the graph", n.name,
                                   to_string(t.shape()), to_string(n.shape)));
    views_[std::size_t(id)].data = t.data();
  }
}

// The plan as planned: a chain is one item; a permute the chains do without, and a group
// its product runs as an epilogue, only run their checks.
std::vector<Executor::RunItem> Executor::run_items() const {
  std::vector<RunItem> items;
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    const auto step = std::uint32_t(t);
    if (!chain_at_.empty() && chain_at_[t] >= 0) {
      items.push_back({RunItem::chain, step, chain_at_[t], &chains_[std::size_t(chain_at_[t])].all_steps});
      t = chains_[std::size_t(chain_at_[t])].last;
    } else if (steps_[t].in_place || by_epilogue_[t]) {
      items.push_back({RunItem::checks_only, step, -1});
    } else if (steps_[t].group >= 0) {
      items.push_back({RunItem::group, step, -1});
    } else if (epilogue_step_[t] >= 0) {
      items.push_back({RunItem::product_epilogue, step, epilogue_step_[t]});
    } else {
      items.push_back({RunItem::kernel, step, -1});
    }
  }
  return items;
}

// Anomaly mode: every step on its own, in order (chains, in-place permutes and epilogues too).
std::vector<Executor::RunItem> Executor::step_by_step_items() const {
  std::vector<RunItem> items;
  for (std::size_t t = 0; t < steps_.size(); ++t)
    items.push_back({steps_[t].group >= 0 ? RunItem::group : RunItem::kernel, std::uint32_t(t), -1});
  return items;
}

// Timing only: run_items() without the SkipWork `kinds` (a chain leaves its own out as it
// runs). An epilogue whose product is left out runs alone, unless groups are left out too; a
// product whose epilogue is left out runs alone.
std::vector<Executor::RunItem> Executor::skip_items(unsigned kinds) {
  std::vector<RunItem> items;
  chain_skip_steps_.assign(chains_.size(), {});
  for (const RunItem& it : run_items()) {
    if (it.kind == RunItem::chain) {
      std::vector<std::uint32_t>& run = chain_skip_steps_[std::size_t(it.other)];
      for (std::uint32_t t : *it.chain_steps)
        if (!skipped(steps_[t], kinds, /*in_chain=*/true)) run.push_back(t);
      items.push_back({RunItem::chain, it.step, it.other, &run});
      continue;
    }
    if (it.kind == RunItem::checks_only) {
      items.push_back(it);
      continue;
    }
    const Step& st = steps_[it.step];
    if (!skipped(st, kinds, /*in_chain=*/false)) {
      items.push_back(it.kind == RunItem::product_epilogue && (kinds & skip_groups) ? RunItem{RunItem::kernel, it.step, -1} : it);
    } else if (it.kind == RunItem::product_epilogue && !(kinds & skip_groups)) {
      items.push_back({RunItem::group, std::uint32_t(it.other), -1});
    }
  }
  return items;
}

void Executor::run_item(const RunItem& it) {
  switch (it.kind) {
    case RunItem::chain: return run_chain(chains_[std::size_t(it.other)], *it.chain_steps);
    case RunItem::checks_only: return;
    case RunItem::group: {
      Step& st = steps_[it.step];
      bind_inputs(st);
      return run_fused(fusion_.groups[std::size_t(st.group)], st.in, st.out, st.stored);
    }
    case RunItem::kernel: {
      Step& st = steps_[it.step];
      bind_inputs(st);
      return st.kernel(KernelArgs{g_.node(st.id), st.in, st.out, &rng_});
    }
    case RunItem::product_epilogue: {
      // The product with its epilogue: the group on each block of rows once it is final (a
      // flat group's values are the rows' values in order).
      Step& st = steps_[it.step];
      Step& es = steps_[std::size_t(it.other)];
      bind_inputs(st);
      bind_inputs(es);
      const Node& n = g_.node(st.id);
      const FusedGroup& grp = fusion_.groups[std::size_t(es.group)];
      const std::int64_t per_row = grp.flat ? n.shape.back() : 1;
      const GemmRowsDone rows_done = [&](std::int64_t r0, std::int64_t r1) {
        run_fused(grp, es.in, es.out, es.stored, r0 * per_row, r1 * per_row);
      };
      return st.kernel(KernelArgs{n, st.in, st.out, &rng_, &rows_done});
    }
  }
}

// The flat loop over the plan's items; profiling and anomaly checks watch it. Value checks
// run after each item, unless work is left out (timing only).
void Executor::run() {
  bind_params();
  for (std::size_t c : leaf_checks_) run_check(c);
  const bool by_step = detect_anomaly_;  // anomaly mode runs every step apart, nothing left out
  const unsigned skip = by_step ? 0u : skip_;
  if (by_step && !chains_.empty()) bind_locals_unsliced();
  if (items_.empty() && !steps_.empty()) {
    items_ = run_items();
    items_by_step_ = step_by_step_items();
  }
  if (skip && skip != items_skip_kinds_) {
    items_skip_ = skip_items(skip);
    items_skip_kinds_ = skip;
  }
  const std::vector<RunItem>& items = by_step ? items_by_step_ : skip ? items_skip_ : items_;
  std::optional<Profiler> profiler;
  std::optional<AnomalyCheck> anomaly;
  std::optional<ReadyNotifier> notifier;
  RunObserver* observers[3];
  int watching = 0;
  if (profile_) observers[watching++] = &profiler.emplace(*this);
  if (by_step) observers[watching++] = &anomaly.emplace(*this);
  if (on_ready_) {
    observers[watching++] = &notifier.emplace(*this);
    for (std::uint32_t i : watch_first_) on_ready_(i);
  }
  for (const RunItem& it : items) {
    for (int k = 0; k < watching; ++k) observers[k]->before(it);
    run_item(it);
    for (int k = 0; k < watching; ++k) observers[k]->after(it);
    if (skip) continue;
    if (it.kind != RunItem::chain) {
      for (std::size_t c : steps_[it.step].checks) run_check(c);
      continue;
    }
    const SliceChain& c = chains_[std::size_t(it.other)];
    for (std::size_t u = c.first; u <= c.last; ++u)
      for (std::size_t ck : steps_[u].checks) run_check(ck);
  }
  if (on_ready_)
    for (std::uint32_t i : watch_last_) on_ready_(i);
}

bool Executor::skipped(const Step& st, unsigned kinds, bool in_chain) const {
  const Node& n = g_.node(st.id);
  if (st.group >= 0) return kinds & (in_chain ? skip_chain_groups : skip_groups);
  if (n.op == OpKind::matmul) return kinds & (in_chain ? skip_chain_products : skip_products);
  return (kinds & skip_ops) && n.op != OpKind::reshape && !op_bound_leaf(n.op);
}

namespace {
// A thread's scratch for the local values of the chain it runs (grown on demand, kept).
char* chain_scratch(std::size_t bytes) {
  struct Block {
    std::unique_ptr<void, void (*)(void*)> p{nullptr, aligned_free};
    std::size_t cap = 0;
  };
  thread_local Block b;
  if (bytes > b.cap) {
    b.p.reset(aligned_alloc64(bytes));
    b.cap = bytes;
  }
  return static_cast<char*>(b.p.get());
}
}  // namespace

// Asks for the values that step t of a chain reads from outside the chain for `slice`, into
// L2, while the thread runs step t of the slice before it: a slice's operands are rows of
// tensors made long before (a backward chain reads q, k, v, dO and the softmax's stored
// exponentials from the forward pass), which the hardware prefetchers cannot see coming at
// the jump from one slice to the next. Values the same for every slice, and those made
// inside the chain, are left alone, and so are the lines a group will store (asking for
// them gained nothing).
void Executor::prefetch_slice(const SliceChain& c, std::size_t t, std::int64_t slice, std::vector<std::int64_t>& idx) const {
  const Step& st = steps_[t];
  const SliceStep& ss = c.steps[t - c.first];
  auto lines = [](const char* p, std::int64_t bytes) {
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p) + std::uintptr_t(bytes);
    for (std::uintptr_t q = reinterpret_cast<std::uintptr_t>(p) / 64 * 64; q < end; q += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(q), 0, 2);
  };
  if (st.group >= 0) {  // a row group's full-row inputs: the slice's rows, one after another
    const FusedGroup& grp = fusion_.groups[std::size_t(st.group)];
    if (grp.flat) return;
    const std::int64_t bytes = ss.extent * grp.n * 4;
    for (std::size_t j = 0; j < grp.inputs.size(); ++j)
      if (ss.in_local[j] < 0 && grp.reads[j].step == grp.n && grp.reads[j].inner == 1)
        lines(static_cast<const char*>(st.in[j].data) + slice * bytes, bytes);
    return;
  }
  const std::size_t l = c.lead.size();
  for (std::size_t d = l, rem = std::size_t(slice); d-- > 0;) {
    idx[d] = std::int64_t(rem % std::size_t(c.lead[d]));
    rem /= std::size_t(c.lead[d]);
  }
  for (std::size_t j = 0; j < st.in.size(); ++j) {  // as run_chain finds the slice of input j
    if (ss.in_local[j] >= 0) continue;
    std::int64_t off = 0;
    bool moves = false;
    for (std::size_t d = 0; d < l; ++d) {
      off += idx[d] * ss.in_stride[j][d];
      moves = moves || ss.in_stride[j][d] != 0;
    }
    if (!moves) continue;
    const char* data = static_cast<const char*>(ss.in_from[j] >= 0 ? views_[std::size_t(ss.in_from[j])].data : st.in[j].data) + off * 4;
    const Shape& sh = ss.in_shape[j];
    const std::int64_t cols = sh.empty() ? 1 : sh.back(), total = numel(sh);
    const std::int64_t ld = j == 0 ? ss.ld_a : j == 1 ? ss.ld_b : 0;  // a matmul's operand read in place
    if (ld == 0 || cols == total) {
      lines(data, total * 4);
    } else {
      for (std::int64_t r = 0; r < total / cols; ++r) lines(data + r * ld * 4, cols * 4);
    }
  }
}

// What a thread keeps while it runs a chain's slices: its scratch for the local values, the
// current slice's multi-index over L, and views reused from step to step.
struct Executor::ChainThread {
  char* scratch = nullptr;
  std::vector<std::int64_t> idx;
  std::vector<View> ins, gin, gstored;
};

// Runs chain c slice-major: each thread takes whole slices through the steps `run`.
void Executor::run_chain(const SliceChain& c, const std::vector<std::uint32_t>& run) {
  for (std::size_t t = c.first; t <= c.last; ++t) bind_inputs(steps_[t]);
  if (profile_) return run_chain_slices<true>(c, run);
  run_chain_slices<false>(c, run);
}

// Profiling (Timed): each step's time over this thread's slices, added to the chain's totals
// at the end (a clock read between steps).
template <bool Timed>
void Executor::run_chain_slices(const SliceChain& c, const std::vector<std::uint32_t>& run) {
  const std::size_t l = c.lead.size();
  parallel_for(c.slices, 1, [&](std::int64_t b, std::int64_t e) {
    ChainThread th;
    th.scratch = c.scratch_bytes > 0 ? chain_scratch(c.scratch_bytes) : nullptr;
    th.idx.resize(l);
    std::vector<double> spent(Timed ? c.last - c.first + 1 : 0, 0.0);
    [[maybe_unused]] auto since = std::chrono::steady_clock::now();
    std::vector<std::int64_t> next_idx(l);
    for (std::int64_t i = b; i < e; ++i) {
      for (std::size_t d = l, rem = std::size_t(i); d-- > 0;) {  // i's multi-index over L
        th.idx[d] = std::int64_t(rem % std::size_t(c.lead[d]));
        rem /= std::size_t(c.lead[d]);
      }
      for (const std::uint32_t t : run) {
        if (i + 1 < e) prefetch_slice(c, t, i + 1, next_idx);
        run_chain_step(c, t, i, th);
        if constexpr (Timed) {
          const auto now = std::chrono::steady_clock::now();
          spent[t - c.first] += std::chrono::duration<double>(now - since).count();
          since = now;
        }
      }
    }
    if constexpr (Timed) {
      const std::lock_guard<std::mutex> lock(chain_profile_mu_);
      for (std::size_t t = c.first; t <= c.last; ++t) chain_step_seconds_[t] += spent[t - c.first];
    }
  });
}

void Executor::run_chain_step(const SliceChain& c, std::size_t t, std::int64_t i, ChainThread& th) {
  const Step& st = steps_[t];
  const SliceStep& ss = c.steps[t - c.first];
  char* const scratch = th.scratch;
  if (st.group >= 0) {
    const FusedGroup& grp = fusion_.groups[std::size_t(st.group)];
    if (!ss.any_local) return run_fused(grp, st.in, st.out, st.stored, i * ss.extent, (i + 1) * ss.extent, ss.rows.get());
    // A local value's slice i sits at its scratch offset: the group, which indexes whole
    // tensors by row, gets a base that puts slice i there (only rows of slice i are
    // touched, and a value made in the chain starts with L, so slice i is the range
    // [i, i + 1) * its per-slice size).
    auto local = [&](View v, NodeId id, std::int64_t off) {
      if (off >= 0) v.data = scratch + off - i * (numel(g_.node(id).shape) / c.slices) * 4;
      return v;
    };
    th.gin.assign(st.in.begin(), st.in.end());
    for (std::size_t j = 0; j < th.gin.size(); ++j) th.gin[j] = local(th.gin[j], grp.inputs[j], ss.in_local[j]);
    th.gstored.assign(st.stored.begin(), st.stored.end());
    for (std::size_t j = 0; j < th.gstored.size(); ++j)
      th.gstored[j] = local(th.gstored[j], grp.stored[j], ss.stored_local[j]);
    return run_fused(grp, th.gin, local(st.out, st.id, ss.out_local), th.gstored, i * ss.extent, (i + 1) * ss.extent,
                     ss.rows.get());
  }
  const std::size_t l = c.lead.size();
  th.ins.clear();
  for (std::size_t j = 0; j < st.in.size(); ++j) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < l; ++d) off += th.idx[d] * ss.in_stride[j][d];
    char* data = ss.in_local[j] >= 0 ? scratch + ss.in_local[j]
                 : ss.in_from[j] >= 0 ? static_cast<char*>(views_[std::size_t(ss.in_from[j])].data) + off * 4
                                      : static_cast<char*>(st.in[j].data) + off * 4;
    th.ins.push_back(View{data, &ss.in_shape[j], st.in[j].dtype});
  }
  char* out_data = ss.out_local >= 0 ? scratch + ss.out_local : static_cast<char*>(st.out.data) + i * ss.out_elems * 4;
  if (ss.out_to >= 0) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < l; ++d) off += th.idx[d] * ss.out_stride[d];
    out_data = static_cast<char*>(views_[std::size_t(ss.out_to)].data) + off * 4;
  }
  const View out{out_data, &ss.out_shape, st.out.dtype};
  if (ss.masked || ss.strided)
    slice_matmul(g_.node(st.id), ss.masked.get(), th.ins, out, {ss.ld_a, ss.ld_b, ss.ld_c});
  else
    st.kernel(KernelArgs{g_.node(st.id), th.ins, out, &rng_});
}

}  // namespace gg
