// The simplification pass. One walk in topological order rebuilds each needed node on its
// simplified inputs into a scratch graph: an identity becomes its operand, a node of
// constant inputs becomes a constant (its own kernel computes the value, so the value is
// the one the executor would compute), and a node equal to an earlier one (same op,
// inputs, attributes, constant data, shape and dtype) becomes that node. A second walk
// copies only what the roots need into the result.
#include "ops/passes/simplify.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ops/ir/op_rule.h"

namespace gg {
namespace {

// Output elements up to which a node of constant inputs is folded into a constant.
constexpr std::int64_t max_folded_elements = 4096;

// Everything that makes two nodes compute the same value, as a string. `random` nodes and
// nodes with no kernel that are not leaves never compare equal (the caller skips them).
std::string cse_key(const Node& n) {
  const Attrs& a = n.attrs;
  std::string k = fmt::format("{}|{}|{}|{}|{}|{},{},{},{}|{}{}{}|{}|{},{},{}|", int(n.op), fmt::join(n.inputs, ","),
                              to_string(n.shape), int(n.dtype), fmt::join(a.dims, ","), a.axis, a.begin, a.end,
                              int(a.keepdim), int(a.trans_a), int(a.trans_b), int(a.cmp), int(a.dtype),
                              int(a.init.kind), a.init.a, a.init.b);
  if (a.scale != 1.f) k += fmt::format("scale={}|", a.scale);
  if (a.no_grad) k += "no_grad|";
  if (a.bf16) k += "bf16|";  // a bf16 product is not the f32 one  // never merged with the same node that passes gradients
  if (n.op == OpKind::input || n.op == OpKind::param) k += n.name;
  if (a.data) k.append(reinterpret_cast<const char*>(a.data->data()), a.data->size() * sizeof(float));
  return k;
}

// The value of node `id` of `g`, whose inputs are all constants, computed by its kernel.
std::vector<float> fold(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::vector<std::vector<float>> in_data;
  std::vector<View> in;
  for (NodeId i : n.inputs) {
    const Node& c = g.node(i);
    in_data.push_back(*c.attrs.data);
    if (c.dtype == DType::i32)  // i32 constants are stored as exact floats
      for (float& v : in_data.back()) {
        const std::int32_t x = std::int32_t(v);
        std::memcpy(&v, &x, 4);
      }
  }
  for (std::size_t k = 0; k < n.inputs.size(); ++k)
    in.push_back(View{in_data[k].data(), &g.node(n.inputs[k]).shape, g.node(n.inputs[k]).dtype});
  std::vector<float> out(std::size_t(numel(n.shape)));
  op_rule(n.op).kernel(KernelArgs{n, in, View{out.data(), &n.shape, n.dtype}, nullptr});
  if (n.dtype == DType::i32)
    for (float& v : out) {
      std::int32_t x;
      std::memcpy(&x, &v, 4);
      v = float(x);
    }
  return out;
}

bool foldable(const Graph& g, const Node& n) {
  if (n.inputs.empty() || !op_rule(n.op).kernel || numel(n.shape) > max_folded_elements) return false;
  // expand only repeats values (folding would store the copies); gather and scatter_add
  // check their indices at run time, where a bad index must be reported.
  if (n.op == OpKind::expand || n.op == OpKind::gather || n.op == OpKind::scatter_add) return false;
  for (NodeId i : n.inputs)
    if (g.node(i).op != OpKind::constant) return false;
  return true;
}

// The node `n` (of the input graph) rewritten on inputs `ins` of the scratch graph `t`: the
// id of an existing node of `t` it equals by its record's identity rule, or -1. A no_grad
// node is kept, and never looked through: dropping it would let gradients pass.
NodeId identity_of(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs& attrs) {
  if (n.attrs.no_grad) return -1;
  const IdentityRule rule = op_rule(n.op).identity;
  return rule ? rule(t, n, ins, attrs) : -1;
}

}  // namespace

Simplified simplify(const Graph& g, const std::vector<NodeId>& roots, const SimplifyOptions& options) {
  for (NodeId r : roots)
    if (r < 0 || r >= g.size())
      throw GraphError(fmt::format("simplify: root %{} is not a node of this graph (it has {} nodes)", r, g.size()));
  Simplified s;
  const std::vector<NodeId> needed = ancestors(g, roots);
  s.stats.before = std::int64_t(needed.size());

  // Walk 1: rebuild into a scratch graph; to[i] is node i's equal in it.
  Graph t;
  std::vector<NodeId> to(std::size_t(g.size()), -1);
  std::unordered_map<std::string, NodeId> seen;
  for (NodeId id : needed) {
    Node unmarked;  // a stop_gradient node without its mark, when the plan drops marks
    const Node* np = &g.node(id);
    if (!options.keep_stop_gradient && np->attrs.no_grad) {
      unmarked = *np;
      unmarked.attrs.no_grad = false;
      np = &unmarked;
    }
    const Node& n = *np;
    std::vector<NodeId> ins;
    for (NodeId i : n.inputs) ins.push_back(to[std::size_t(i)]);
    Attrs attrs = n.attrs;
    if (NodeId same = identity_of(t, n, ins, attrs); same >= 0) {
      to[std::size_t(id)] = same;
      ++s.stats.identities;
      continue;
    }
    NodeId m = t.add(n.op, ins, attrs, n.name, n.loc);
    t.set_site(m, n.loc, n.inner_loc);
    if (foldable(t, t.node(m))) {
      const Shape shape = t.node(m).shape;
      Attrs c;
      c.dims = shape;
      c.dtype = t.node(m).dtype;
      c.data = std::make_shared<const std::vector<float>>(fold(t, m));
      m = t.add(OpKind::constant, {}, std::move(c), n.name, n.loc);
      t.set_site(m, n.loc, n.inner_loc);
      ++s.stats.folded;
    }
    if (t.node(m).op != OpKind::random) {
      auto [it, fresh] = seen.emplace(cse_key(t.node(m)), m);
      if (!fresh) {
        m = it->second;
        ++s.stats.merged;
      }
    }
    to[std::size_t(id)] = m;
  }

  // Walk 2: copy what the roots need.
  std::vector<NodeId> t_roots;
  for (NodeId id : roots.empty() ? needed : roots) t_roots.push_back(to[std::size_t(id)]);
  std::vector<NodeId> out(std::size_t(t.size()), -1);
  for (NodeId id : ancestors(t, t_roots)) {
    const Node& n = t.node(id);
    std::vector<NodeId> ins;
    for (NodeId i : n.inputs) ins.push_back(out[std::size_t(i)]);
    const NodeId m = s.graph.add(n.op, std::move(ins), n.attrs, n.name, n.loc);
    s.graph.set_site(m, n.loc, n.inner_loc);
    out[std::size_t(id)] = m;
  }
  s.map.assign(std::size_t(g.size()), -1);
  for (NodeId id : needed)
    if (to[std::size_t(id)] >= 0) s.map[std::size_t(id)] = out[std::size_t(to[std::size_t(id)])];
  for (NodeId r : roots) s.roots.push_back(s.map[std::size_t(r)]);
  for (const Graph::Check& c : g.checks())
    if (s.map[std::size_t(c.node)] >= 0) s.graph.add_check(s.map[std::size_t(c.node)], c.context, c.check);
  s.graph.set_step_scopes(g.step_scopes());  // names are kept, and so is which scopes are steps (for to_dot)
  s.stats.after = s.graph.size();
  return s;
}

}  // namespace gg
