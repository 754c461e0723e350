// Running a plan: bind the parameters, then the flat loop over the steps; a batch-slice
// chain runs slice-major on the threads, each thread taking whole slices through its steps.
#include "ops/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ops/gemm.h"
#include "ops/masked.h"
#include "ops/parallel.h"

namespace gg {

void Executor::run() {
  // Bind parameters (the store may have replaced a tensor since the last run).
  for (NodeId id : order_) {
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
  for (std::size_t c : leaf_checks_) run_check(c);
  if (profile_) {
    step_seconds_.resize(steps_.size(), 0.0);
    chain_step_seconds_.resize(steps_.size(), 0.0);
    ++profiled_runs_;
  }
  if (detect_anomaly_ && !chains_.empty()) bind_locals_unsliced();  // its chains run step by step
  const unsigned skip = detect_anomaly_ ? 0u : skip_;
  auto checks = [&](const Step& st) {  // value checks, not run while work is left out
    if (!skip)
      for (std::size_t c : st.checks) run_check(c);
  };
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    if (!chain_at_.empty() && chain_at_[t] >= 0 && !detect_anomaly_) {
      const SliceChain& c = chains_[std::size_t(chain_at_[t])];
      std::chrono::steady_clock::time_point t0{};
      if (profile_) t0 = std::chrono::steady_clock::now();
      run_chain(c);
      if (profile_) {
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        step_seconds_[t] += dt;
        sliced_seconds_ += dt;
        ++sliced_calls_;
        sliced_steps_ += std::int64_t(c.last - c.first + 1);
      }
      for (std::size_t u = c.first; u <= c.last; ++u) checks(steps_[u]);
      t = c.last;
      continue;
    }
    if ((steps_[t].in_place || by_epilogue_[t]) && !detect_anomaly_) {  // the chains or its product ran it
      checks(steps_[t]);
      continue;
    }
    Step* run_st = &steps_[t];
    if (skip && skipped(*run_st, skip, /*in_chain=*/false)) {
      // An epilogue whose product is left out runs alone, unless groups are left out too.
      if (epilogue_step_[t] < 0 || (skip & skip_groups)) continue;
      run_st = &steps_[std::size_t(epilogue_step_[t])];
    }
    Step& st = *run_st;
    const Node& n = g_.node(st.id);
    bind_inputs(st);
    auto compute = [&] {
      if (st.group >= 0) return run_fused(fusion_.groups[std::size_t(st.group)], st.in, st.out, st.stored);
      if (epilogue_step_[t] < 0 || detect_anomaly_ || (skip & skip_groups))
        return st.kernel(KernelArgs{n, st.in, st.out, &rng_});
      // The product with its epilogue: the group on each block of rows once it is final
      // (a flat group's values are the rows' values in order). Anomaly mode runs them apart.
      Step& es = steps_[std::size_t(epilogue_step_[t])];
      bind_inputs(es);
      const FusedGroup& grp = fusion_.groups[std::size_t(es.group)];
      const std::int64_t per_row = grp.flat ? n.shape.back() : 1;
      const GemmRowsDone rows_done = [&](std::int64_t r0, std::int64_t r1) {
        run_fused(grp, es.in, es.out, es.stored, r0 * per_row, r1 * per_row);
      };
      st.kernel(KernelArgs{n, st.in, st.out, &rng_, &rows_done});
    };
    if (!profile_) {
      compute();
      if (detect_anomaly_) check_anomaly(st);
      checks(st);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    compute();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    step_seconds_[std::size_t(&st - steps_.data())] += dt;
    if (st.group >= 0) {
      fused_seconds_ += dt;
      ++fused_calls_;
      fused_members_ += std::int64_t(fusion_.groups[std::size_t(st.group)].members.size());
    } else {
      op_seconds_[std::size_t(n.op)] += dt;
      ++op_calls_[std::size_t(n.op)];
    }
    if (detect_anomaly_) check_anomaly(st);
    checks(st);
  }
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
// inside the chain, are left alone. Measured on a Zen 5 (GG_NUM_THREADS=1, step profile):
// the small model's backward chains 1.55-1.62 -> 1.32-1.39 ms a step, the forward ones and
// the medium model's (whose slices are 16 times larger) unchanged within the noise; asking
// for the lines a group will store as well measured nothing.
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

// Runs chain c slice-major: each thread takes whole slices through every step.
void Executor::run_chain(const SliceChain& c) {
  for (std::size_t t = c.first; t <= c.last; ++t) bind_inputs(steps_[t]);
  const std::size_t l = c.lead.size();
  parallel_for(c.slices, 1, [&](std::int64_t b, std::int64_t e) {
    char* const scratch = c.scratch_bytes > 0 ? chain_scratch(c.scratch_bytes) : nullptr;
    std::vector<View> ins, gin, gstored;
    std::vector<std::int64_t> idx(l);
    // Profiling: each step's time over this thread's slices, added to the chain's totals at
    // the end (a clock read between steps; none when not profiling).
    std::vector<double> spent(profile_ ? c.last - c.first + 1 : 0, 0.0);
    auto since = std::chrono::steady_clock::now();
    auto lap = [&](std::size_t t) {
      if (spent.empty()) return;
      const auto now = std::chrono::steady_clock::now();
      spent[t - c.first] += std::chrono::duration<double>(now - since).count();
      since = now;
    };
    std::vector<std::int64_t> next_idx(l);
    for (std::int64_t i = b; i < e; ++i) {
      for (std::size_t d = l, rem = std::size_t(i); d-- > 0;) {  // i's multi-index over L
        idx[d] = std::int64_t(rem % std::size_t(c.lead[d]));
        rem /= std::size_t(c.lead[d]);
      }
      for (std::size_t t = c.first; t <= c.last; ++t) {
        const Step& st = steps_[t];
        const SliceStep& ss = c.steps[t - c.first];
        if (i + 1 < e) prefetch_slice(c, t, i + 1, next_idx);
        if (skip_ && skipped(st, skip_, /*in_chain=*/true)) continue;  // (chains never run in anomaly mode)
        if (st.group >= 0) {
          const FusedGroup& grp = fusion_.groups[std::size_t(st.group)];
          if (!ss.any_local) {
            run_fused(grp, st.in, st.out, st.stored, i * ss.extent, (i + 1) * ss.extent, ss.rows.get());
            lap(t);
            continue;
          }
          // A local value's slice i sits at its scratch offset: the group, which indexes
          // whole tensors by row, gets a base that puts slice i there (only rows of slice
          // i are touched, and a value made in the chain starts with L, so slice i is the
          // range [i, i + 1) * its per-slice size).
          auto local = [&](View v, NodeId id, std::int64_t off) {
            if (off >= 0) v.data = scratch + off - i * (numel(g_.node(id).shape) / c.slices) * 4;
            return v;
          };
          gin.assign(st.in.begin(), st.in.end());
          for (std::size_t j = 0; j < gin.size(); ++j) gin[j] = local(gin[j], grp.inputs[j], ss.in_local[j]);
          gstored.assign(st.stored.begin(), st.stored.end());
          for (std::size_t j = 0; j < gstored.size(); ++j) gstored[j] = local(gstored[j], grp.stored[j], ss.stored_local[j]);
          run_fused(grp, gin, local(st.out, st.id, ss.out_local), gstored, i * ss.extent, (i + 1) * ss.extent,
                    ss.rows.get());
          lap(t);
          continue;
        }
        ins.clear();
        for (std::size_t j = 0; j < st.in.size(); ++j) {
          std::int64_t off = 0;
          for (std::size_t d = 0; d < l; ++d) off += idx[d] * ss.in_stride[j][d];
          char* data = ss.in_local[j] >= 0 ? scratch + ss.in_local[j]
                       : ss.in_from[j] >= 0 ? static_cast<char*>(views_[std::size_t(ss.in_from[j])].data) + off * 4
                                            : static_cast<char*>(st.in[j].data) + off * 4;
          ins.push_back(View{data, &ss.in_shape[j], st.in[j].dtype});
        }
        char* out_data = ss.out_local >= 0 ? scratch + ss.out_local : static_cast<char*>(st.out.data) + i * ss.out_elems * 4;
        if (ss.out_to >= 0) {
          std::int64_t off = 0;
          for (std::size_t d = 0; d < l; ++d) off += idx[d] * ss.out_stride[d];
          out_data = static_cast<char*>(views_[std::size_t(ss.out_to)].data) + off * 4;
        }
        const View out{out_data, &ss.out_shape, st.out.dtype};
        if (ss.masked || ss.strided)
          slice_matmul(g_.node(st.id), ss.masked.get(), ins, out, {ss.ld_a, ss.ld_b, ss.ld_c});
        else
          st.kernel(KernelArgs{g_.node(st.id), ins, out, &rng_});
        lap(t);
      }
    }
    if (!spent.empty()) {
      const std::lock_guard<std::mutex> lock(chain_profile_mu_);
      for (std::size_t t = c.first; t <= c.last; ++t) chain_step_seconds_[t] += spent[t - c.first];
    }
  });
}

}  // namespace gg
