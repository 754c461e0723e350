// grad_stats: one pass over each gradient. structurally_zero_grads: for each parameter,
// the structure of its tangent is carried forward node by node (ops/ir/tangent.h) to the loss,
// noting where a path was blocked (an op with no gradient), stopped (stop_gradient) or
// cancelled (a shift removed).
#include "autodiff/grad_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ops/ir/op_rule.h"
#include "ops/ir/tangent.h"

namespace gg {

GradStats grad_stats(std::span<const ParamGrad> pg, double max_norm) {
  GradStats s;
  double total = 0;
  for (const ParamGrad& p : pg) {
    ParamGradStats ps{p.name, std::int64_t(p.grad.size())};
    double ss = 0;
    std::int64_t zeros = 0;
    for (float v : p.grad) {
      if (!std::isfinite(v)) {
        ++ps.nonfinite;
        continue;
      }
      ss += double(v) * double(v);
      ps.max_abs = std::max(ps.max_abs, double(std::abs(v)));
      zeros += v == 0.f;
    }
    ps.norm = std::sqrt(ss);
    ps.zero_fraction = ps.numel > 0 ? double(zeros) / double(ps.numel) : 0.0;
    total += ss;
    s.params.push_back(std::move(ps));
  }
  s.global_norm = std::sqrt(total);
  s.clipped_norm = s.global_norm;
  if (max_norm > 0) s.clipped_norm = s.global_norm * double(float(std::min(1.0, max_norm / (s.global_norm + 1e-6))));
  return s;
}

namespace {
std::string where_is(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return fmt::format("{} at {}{}", op_name(n.op), site_string(n.loc), n.name.empty() ? "" : fmt::format(" ('{}')", n.name));
}
}  // namespace

std::vector<ZeroGrad> structurally_zero_grads(const Graph& g, NodeId loss, const std::vector<NodeId>& params) {
  if (loss < 0 || loss >= g.size())
    throw GraphError(fmt::format("structurally_zero_grads: loss %{} is not a node of this graph (it has {} nodes)", loss,
                                 g.size()));
  for (NodeId p : params) {
    if (p < 0 || p >= g.size())
      throw GraphError(fmt::format("structurally_zero_grads: %{} is not a node of this graph", p));
    if (!g.node(p).is_param()) g.fail(g.node(p), "structurally_zero_grads looks at parameters only");
  }
  std::vector<char> needed(std::size_t(g.size()), 0);
  for (NodeId id : ancestors(g, {loss})) needed[std::size_t(id)] = 1;

  std::vector<ZeroGrad> out;
  std::vector<std::string> seen;
  for (NodeId p : params) {
    const std::string& name = g.node(p).name;
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    if (!needed[std::size_t(p)]) {
      out.push_back({name, "no path: the loss does not read it"});
      continue;
    }
    // Every param node of this name is the same tensor: seed them all.
    std::vector<TangentShape> t(std::size_t(loss) + 1);
    std::vector<NodeId> blocked, cancelled, stopped;
    for (NodeId id = 0; id <= loss; ++id) {
      const Node& n = g.node(id);
      if (!needed[std::size_t(id)]) continue;
      if (n.is_param()) {
        if (n.name == name) t[std::size_t(id)] = seed_tangent(g, id);
        continue;
      }
      std::vector<const TangentShape*> in;
      bool any = false;
      for (NodeId i : n.inputs) {
        in.push_back(&t[std::size_t(i)]);
        any = any || !t[std::size_t(i)].zero;
      }
      t[std::size_t(id)] = propagate_tangent(g, id, in);
      if (any && t[std::size_t(id)].zero)
        (n.attrs.no_grad ? stopped : t[std::size_t(id)].cancelled ? cancelled : blocked).push_back(id);
    }
    if (!t[std::size_t(loss)].zero) continue;
    std::string reason;
    if (!cancelled.empty())
      reason = fmt::format("every path is cancelled by a shift invariance: it adds the same amount along the axis that "
                           "x - max(x) normalizes at {} ({} such place{}; softmax and log_softmax remove any per-row "
                           "constant)", where_is(g, cancelled.front()), cancelled.size(), cancelled.size() > 1 ? "s" : "");
    if (!blocked.empty())
      reason += fmt::format("{}every path passes through an op with no gradient: {}{}", reason.empty() ? "" : "; ",
                            where_is(g, blocked.front()),
                            blocked.size() > 1 ? fmt::format(" and {} more", blocked.size() - 1) : "");
    // A stop_gradient next to a cancellation is the detached max of that same x - max(x).
    if (!stopped.empty() && cancelled.empty())
      reason += fmt::format("{}every path passes through stop_gradient: {}{}", reason.empty() ? "" : "; ",
                            where_is(g, stopped.front()),
                            stopped.size() > 1 ? fmt::format(" and {} more", stopped.size() - 1) : "");
    out.push_back({name, reason});
  }
  return out;
}

}  // namespace gg
