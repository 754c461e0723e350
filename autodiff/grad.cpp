// The reverse pass: mark what lies between wrt and out, walk it in reverse topological
// order, ask each node's rule for its inputs' gradients, sum them down to the inputs'
// shapes and accumulate.
#include "autodiff/grad.h"

#include <fmt/format.h>

#include "ops/op_rule.h"

namespace gg {
namespace {

std::string grad_name(const Graph& g, NodeId id) {
  const std::string& n = g.node(id).name;
  return fmt::format("grad({})", n.empty() ? fmt::format("%{}", id) : n);
}

// Adds `gi` into the gradient slot of node `to`, named grad(<to's name>). A node made by
// this rule call (id >= fresh) that is the whole gradient so far is renamed to match.
void accumulate(Graph& g, std::vector<NodeId>& slot, NodeId to, NodeId gi, NodeId fresh) {
  const Node& n = g.node(to);
  NameScope scope(g, grad_name(g, to), true);
  gi = op::sum_to(g, gi, n.shape);
  slot[std::size_t(to)] = slot[std::size_t(to)] < 0 ? gi : op::add(g, slot[std::size_t(to)], gi);
  if (slot[std::size_t(to)] >= fresh) g.set_name(slot[std::size_t(to)], grad_name(g, to));
}

}  // namespace

std::vector<NodeId> grad(Graph& g, NodeId out, const std::vector<NodeId>& wrt, NodeId seed, std::source_location loc) {
  const std::string at = site_string(g.user_loc().value_or(loc));
  auto fail = [&](const std::string& msg) { throw GraphError(fmt::format("grad at {}: {}", at, msg)); };
  auto in_graph = [&](NodeId id, const char* role) {
    if (id < 0 || id >= g.size()) fail(fmt::format("{} %{} is not a node of this graph (it has {} nodes)", role, id, g.size()));
  };
  in_graph(out, "output");
  for (NodeId w : wrt) in_graph(w, "wrt");
  if (seed >= 0) in_graph(seed, "seed");
  const Node& o = g.node(out);
  const std::string who = o.name.empty() ? fmt::format("%{}", out) : fmt::format("'{}'", o.name);
  if (seed < 0 && !o.shape.empty())
    fail(fmt::format("needs a scalar output or a seed; {} ({} at {}) is {}", who, op_name(o.op), site_string(o.loc),
                     to_string(o.shape)));
  if (seed >= 0 && g.node(seed).shape != o.shape)
    fail(fmt::format("seed {} does not match the output {} {}", to_string(g.node(seed).shape), who, to_string(o.shape)));

  const std::size_t n0 = std::size_t(out) + 1;  // nodes at or before `out`
  // depends[i]: node i is a differentiable function of some wrt.
  std::vector<char> depends(n0, 0), on_path(n0, 0);
  for (NodeId w : wrt)
    if (w <= out) depends[std::size_t(w)] = 1;
  for (std::size_t i = 0; i < n0; ++i) {
    const Node& n = g.node(NodeId(i));
    if (depends[i] || n.dtype != DType::f32 || !op_rule(n.op).grad) continue;
    for (NodeId in : n.inputs) depends[i] = depends[i] || depends[std::size_t(in)];
  }
  // on_path[i]: depends on wrt and `out` depends on it.
  on_path[std::size_t(out)] = depends[std::size_t(out)];
  for (std::size_t i = n0; i-- > 0;)
    if (on_path[i])
      for (NodeId in : g.node(NodeId(i)).inputs) on_path[std::size_t(in)] = depends[std::size_t(in)];

  std::vector<NodeId> slot(n0, -1);
  {
    NameScope scope(g, grad_name(g, out), true);
    UserSite site(g, o.loc, true);
    slot[std::size_t(out)] = seed >= 0 ? seed : op::scalar(g, 1.f);
  }
  for (std::size_t i = n0; i-- > 0;) {
    if (!on_path[i] || slot[i] < 0) continue;
    const Node& n = g.node(NodeId(i));
    auto rule = op_rule(n.op).grad;
    if (!rule || n.inputs.empty()) continue;
    std::vector<bool> needs(n.inputs.size());
    bool any = false;
    for (std::size_t k = 0; k < n.inputs.size(); ++k) any |= (needs[k] = on_path[std::size_t(n.inputs[k])] != 0);
    if (!any) continue;
    std::vector<NodeId> gin(n.inputs.size(), -1);
    {
      NameScope scope(g, grad_name(g, NodeId(i)), true);
      UserSite site(g, n.loc, true);
      const NodeId fresh = g.size();
      GradArgs args{g, NodeId(i), slot[i], needs, gin};
      rule(args);
      for (std::size_t k = 0; k < n.inputs.size(); ++k)
        if (needs[k] && gin[k] >= 0) accumulate(g, slot, n.inputs[k], gin[k], fresh);
    }
  }

  std::vector<NodeId> result;
  for (NodeId w : wrt) {
    NodeId r = w <= out ? slot[std::size_t(w)] : -1;
    if (r < 0) {
      NameScope scope(g, grad_name(g, w), true);
      r = op::expand(g, op::scalar(g, 0.f), g.node(w).shape);
    }
    result.push_back(r);
  }
  return result;
}

}  // namespace gg
