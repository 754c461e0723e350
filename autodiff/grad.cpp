// The reverse pass: mark what lies between wrt and out (a no_grad node cuts the path),
// walk it in reverse topological order, ask each node's rule for its inputs' gradients,
// sum them down to the inputs' shapes and accumulate. Gradient nodes are named after the
// node they are the gradient of, by its user name, or (unnamed) by the named node its
// gradient flows into.
#include "autodiff/grad.h"

#include <fmt/format.h>

#include "ops/ir/op_rule.h"

namespace gg {
namespace {

// What the gradient of each node on the path is called: the node's user name, else the
// label of one input on the path, the value its gradient flows into (an input with a user
// name of its own first, else the first one's label), else its id. One name, never a list of
// every contributor: in an unrolled loop a list would grow with each step.
std::vector<std::string> path_labels(const Graph& g, const std::vector<char>& on_path) {
  std::vector<std::string> label(on_path.size());
  for (std::size_t i = 0; i < on_path.size(); ++i) {
    const Node& n = g.node(NodeId(i));
    if (!n.name.empty()) {
      label[i] = n.name;
      continue;
    }
    NodeId into = -1;
    for (NodeId in : n.inputs) {
      if (!on_path[std::size_t(in)]) continue;
      if (!g.node(in).name.empty()) {
        into = in;
        break;
      }
      if (into < 0) into = in;
    }
    label[i] = into < 0 ? fmt::format("%{}", i) : label[std::size_t(into)];
  }
  return label;
}

std::string grad_name(const std::string& label) { return fmt::format("grad({})", label); }

// Adds `gi` into the gradient slot of node `to`, named grad(<to's label>). A node made by
// this rule call (id >= fresh) that is the whole gradient so far is renamed to match.
void accumulate(Graph& g, std::vector<NodeId>& slot, NodeId to, NodeId gi, NodeId fresh, const std::string& label) {
  const Node& n = g.node(to);
  NameScope scope(g, grad_name(label), true);
  gi = op::sum_to(g, gi, n.shape);
  slot[std::size_t(to)] = slot[std::size_t(to)] < 0 ? gi : op::add(g, slot[std::size_t(to)], gi);
  if (slot[std::size_t(to)] >= fresh) g.set_name(slot[std::size_t(to)], grad_name(label));
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
  // depends[i]: node i is a differentiable function of some wrt. A node marked no_grad
  // (op::stop_gradient) depends on nothing: no gradient node is built behind it.
  std::vector<char> depends(n0, 0), on_path(n0, 0);
  for (NodeId w : wrt)
    if (w <= out) depends[std::size_t(w)] = 1;
  for (std::size_t i = 0; i < n0; ++i) {
    const Node& n = g.node(NodeId(i));
    if (depends[i] || n.dtype != DType::f32 || !op_rule(n.op).grad || n.attrs.no_grad) continue;
    for (NodeId in : n.inputs) depends[i] = depends[i] || depends[std::size_t(in)];
  }
  // on_path[i]: depends on wrt and `out` depends on it.
  on_path[std::size_t(out)] = depends[std::size_t(out)];
  for (std::size_t i = n0; i-- > 0;)
    if (on_path[i])
      for (NodeId in : g.node(NodeId(i)).inputs) on_path[std::size_t(in)] = depends[std::size_t(in)];

  std::vector<NodeId> slot(n0, -1);
  const std::vector<std::string> label = path_labels(g, on_path);
  auto label_of = [&](NodeId id) {
    const std::string& n = g.node(id).name;
    return std::size_t(id) < n0 && !label[std::size_t(id)].empty() ? label[std::size_t(id)]
                                                                      : n.empty() ? fmt::format("%{}", id) : n;
  };
  {
    NameScope scope(g, grad_name(label_of(out)), true);
    UserSite site(g, o.loc, true);
    UserSite inner(g, o.inner_loc);
    slot[std::size_t(out)] = seed >= 0 ? seed : op::scalar(g, 1.f);
  }
  for (std::size_t i = n0; i-- > 0;) {
    if (!on_path[i] || slot[i] < 0) continue;
    const Node& n = g.node(NodeId(i));
    auto rule = op_rule(n.op).grad;
    if (!rule || n.inputs.empty() || n.attrs.no_grad) continue;  // no_grad: on the path only as a wrt
    std::vector<bool> needs(n.inputs.size());
    bool any = false;
    for (std::size_t k = 0; k < n.inputs.size(); ++k) any |= (needs[k] = on_path[std::size_t(n.inputs[k])] != 0);
    if (!any) continue;
    std::vector<NodeId> gin(n.inputs.size(), -1);
    {
      // The rule's nodes are named after what their gradient flows into.
      NameScope scope(g, grad_name(label_of(NodeId(i))), true);
      UserSite site(g, n.loc, true);
      UserSite inner(g, n.inner_loc);  // the composite's line, as in the forward node
      const NodeId fresh = g.size();
      GradArgs args{g, NodeId(i), slot[i], needs, gin};
      rule(args);
      for (std::size_t k = 0; k < n.inputs.size(); ++k)
        if (needs[k] && gin[k] >= 0) accumulate(g, slot, n.inputs[k], gin[k], fresh, label_of(n.inputs[k]));
    }
  }

  std::vector<NodeId> result;
  for (NodeId w : wrt) {
    NodeId r = w <= out ? slot[std::size_t(w)] : -1;
    if (r < 0) {
      NameScope scope(g, grad_name(label_of(w)), true);
      r = op::expand(g, op::scalar(g, 0.f), g.node(w).shape);
    }
    result.push_back(r);
  }
  return result;
}

}  // namespace gg
