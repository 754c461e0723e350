// What a plan tells after running: the anomaly mode's report of the first non-finite value,
// and the per-op and per-step profiles.
#include "ops/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "ops/passes/masked.h"

namespace gg {

namespace {
struct ValueSummary {
  std::int64_t nan = 0, inf = 0;
  double lo = INFINITY, hi = -INFINITY;  // over the finite values
};
ValueSummary summarize(const View& v) {
  ValueSummary s;
  for (std::int64_t i = 0, n = v.numel(); i < n; ++i) {
    const double x = v.dtype == DType::i32 ? double(v.i()[i]) : double(v.f()[i]);
    if (std::isnan(x)) ++s.nan;
    else if (std::isinf(x)) ++s.inf;
    else {
      s.lo = std::min(s.lo, x);
      s.hi = std::max(s.hi, x);
    }
  }
  return s;
}
std::string describe_node(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return fmt::format("%{} {} {}{}{}", id, op_name(n.op), to_string(n.dtype), to_string(n.shape),
                     n.name.empty() ? std::string() : fmt::format(" '{}'", n.name));
}
}  // namespace

// "max, sub, exp, sum, div": a fused group's ops in execution order.
std::string Executor::group_ops(int group) const {
  std::string s;
  for (NodeId m : fusion_.groups[std::size_t(group)].members) s += (s.empty() ? "" : ", ") + std::string(op_name(g_.node(m).op));
  return s;
}

// A group's stored members, in execution order, then its root (or the step's one node).
void Executor::check_anomaly(const Step& st) const {
  if (st.group >= 0) {
    const std::vector<NodeId>& stored = fusion_.groups[std::size_t(st.group)].stored;
    for (std::size_t i = 0; i < stored.size(); ++i) check_value(st, stored[i], st.stored[i]);
  }
  check_value(st, st.id, st.out);
}

void Executor::check_value(const Step& st, NodeId id, const View& v) const {
  if (v.dtype != DType::f32) return;
  const ValueSummary out = summarize(v);
  if (out.nan == 0 && out.inf == 0) return;
  const Node& n = g_.node(id);
  const bool backward = n.name.rfind("grad(", 0) == 0;
  // The inputs: those holding a NaN or an Inf when any does (the cause, carried in), else
  // every one's range (the op made the first one).
  std::string carried, ranges;
  bool inf_in = false;
  const std::vector<NodeId>& read = reads(st);
  for (std::size_t i = 0; i < read.size(); ++i) {
    const ValueSummary s = summarize(st.in[i]);
    inf_in = inf_in || s.inf > 0;
    (s.nan + s.inf > 0 ? carried : ranges) +=
        fmt::format("; input {} {} at {}: {}, {} NaN, {} Inf", i, describe_node(g_, read[i]),
                    site_string(g_.node(read[i]).loc),
                    s.lo <= s.hi ? fmt::format("min {:.6g} max {:.6g}", s.lo, s.hi) : "no finite value", s.nan, s.inf);
  }
  const std::string& ins = carried.empty() ? ranges : carried;
  // An infinity passed on from an input is not new (a mask's -inf flowing through where and
  // the max trick is by design); a NaN always is, and so is an infinity made here (overflow,
  // log of 0, division by 0).
  if (out.nan == 0 && inf_in) return;
  throw GraphError(fmt::format("{} at {} ('{}'): anomaly: the first non-finite value of this run: {} node %{} {}{} "
                               "holds {} NaN and {} Inf of {} values{}",
                               op_name(n.op), site_string(n.loc), n.name, backward ? "backward" : "forward", id,
                               to_string(n.dtype), to_string(n.shape), out.nan, out.inf, v.numel(),
                               st.group < 0 ? ins
                                            : fmt::format(" (the {} of a fused group of {} ops: {}; run with "
                                                          "GG_FUSE=0 to check each one){}",
                                                          id == st.id ? "root" : "stored member",
                                                          fusion_.groups[std::size_t(st.group)].members.size(),
                                                          group_ops(st.group), ins)));
}

std::string Executor::profile_report() const {
  std::vector<int> kinds;
  double total = 0;
  for (int k = 0; k < op_count; ++k)
    if (op_calls_[std::size_t(k)] > 0) {
      kinds.push_back(k);
      total += op_seconds_[std::size_t(k)];
    }
  std::sort(kinds.begin(), kinds.end(), [&](int a, int b) { return op_seconds_[std::size_t(a)] > op_seconds_[std::size_t(b)]; });
  std::string s = fmt::format("{:<12} {:>8} {:>10} {:>6}\n", "op", "calls", "total ms", "share");
  total += fused_seconds_ + sliced_seconds_;
  bool fused_listed = fused_calls_ == 0;
  auto fused_line = [&] {
    fused_listed = true;
    return fmt::format("{:<12} {:>8} {:>10.1f} {:>5.1f}%  ({:.1f} ops a group)\n", "fused", fused_calls_,
                       fused_seconds_ * 1e3, 100.0 * fused_seconds_ / std::max(total, 1e-12),
                       double(fused_members_) / double(std::max<std::int64_t>(fused_calls_, 1)));
  };
  for (int k : kinds) {
    if (!fused_listed && fused_seconds_ >= op_seconds_[std::size_t(k)]) s += fused_line();
    s += fmt::format("{:<12} {:>8} {:>10.1f} {:>5.1f}%\n", op_name(OpKind(k)), op_calls_[std::size_t(k)],
                     op_seconds_[std::size_t(k)] * 1e3, 100.0 * op_seconds_[std::size_t(k)] / std::max(total, 1e-12));
  }
  if (!fused_listed) s += fused_line();
  if (sliced_calls_ > 0)
    s += fmt::format("{:<12} {:>8} {:>10.1f} {:>5.1f}%  (batch-slice chains of {:.1f} steps, matmuls and groups inside)\n",
                     "sliced", sliced_calls_, sliced_seconds_ * 1e3, 100.0 * sliced_seconds_ / std::max(total, 1e-12),
                     double(sliced_steps_) / double(sliced_calls_));
  return s;
}

std::string Executor::profile_steps_report(int top) const {
  std::vector<std::size_t> idx(step_seconds_.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return step_seconds_[a] > step_seconds_[b]; });
  const double runs = double(std::max<std::int64_t>(profiled_runs_, 1));
  std::string s = fmt::format("{:>9} {:>7}  {}\n", "ms/run", "GFLOPS", "step");
  // "fused x7 [mul, where, ...]" for a group ("compiled x7" when it runs compiled), else the op's name
  auto label = [&](const Step& step) {
    if (step.group < 0) return std::string(op_name(g_.node(step.id).op));
    const FusedGroup& grp = fusion_.groups[std::size_t(step.group)];
    return fmt::format("{} x{} [{}]", grp.compiled >= 0 ? "compiled" : "fused", grp.members.size(), group_ops(step.group));
  };
  auto transposes = [&](const Node& m) { return fmt::format("{}{}", m.attrs.trans_a ? "T" : "N", m.attrs.trans_b ? "T" : "N"); };
  for (std::size_t r = 0; r < idx.size() && int(r) < top; ++r) {
    const Step& st = steps_[idx[r]];
    const Node& n = g_.node(st.id);
    const double ms = step_seconds_[idx[r]] / runs * 1e3;
    std::string ins;
    for (NodeId in : reads(st)) ins += (ins.empty() ? "" : ", ") + to_string(g_.node(in).shape);
    std::string what = label(st);
    // A product and its epilogue group: one time (the GFLOPS count the product's work only).
    const std::string epilogue = epilogue_step_[idx[r]] >= 0 && !detect_anomaly_
                                     ? " + epilogue " + label(steps_[std::size_t(epilogue_step_[idx[r]])])
                                     : "";
    if (!chain_at_.empty() && chain_at_[idx[r]] >= 0) {
      const SliceChain& c = chains_[std::size_t(chain_at_[idx[r]])];
      std::string inside;  // the chain's steps: "matmul NT, fused x7 [...], matmul NN"
      double chain_total = 0;
      for (std::size_t t = c.first; t <= c.last && t < chain_step_seconds_.size(); ++t) chain_total += chain_step_seconds_[t];
      for (std::size_t t = c.first; t <= c.last; ++t) {
        const Step& cs = steps_[t];
        const Node& cn = g_.node(cs.id);
        if (t != c.first) inside += ", ";
        inside += label(cs);
        if (cs.group < 0 && cn.op == OpKind::matmul) inside += fmt::format(" {}", transposes(cn));
        if (const auto& mb = c.steps[t - c.first].masked)
          inside += fmt::format(" masked {:.0f}%", 100.0 * mb->fraction);
        if (const auto& rl = c.steps[t - c.first].rows) inside += fmt::format(" rows {:.0f}%", 100.0 * rl->fraction);
        if (chain_total > 0) inside += fmt::format(": {:.0f}%", 100.0 * chain_step_seconds_[t] / chain_total);
      }
      what = fmt::format("sliced chain of {} steps over {} slices [{}{}], from {}", c.last - c.first + 1, c.slices, inside,
                         chain_total > 0 ? "; after each step its share of the chain's time" : "", what);
    }
    std::string gf = "";
    if (st.group < 0 && n.op == OpKind::matmul && (chain_at_.empty() || chain_at_[idx[r]] < 0)) {
      const Shape& a = g_.node(n.inputs[0]).shape;
      const double k = double(n.attrs.trans_a ? a[a.size() - 2] : a.back());
      gf = fmt::format("{:.1f}", 2.0 * double(numel(n.shape)) * k / (ms * 1e-3) * 1e-9);
    }
    s += fmt::format("{:>9.3f} {:>7}  {}{} {} <- {}{}{}\n", ms, gf, what,
                     n.op == OpKind::matmul ? fmt::format("[{}]", transposes(n)) : "",
                     to_string(n.shape), ins, n.name.empty() ? "" : fmt::format("  '{}'", n.name), epilogue);
  }
  return s;
}

}  // namespace gg
