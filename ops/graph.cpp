// The graph container: node construction through the op table, name scopes, user call
// sites, error formatting and the text/dot listings.
#include "ops/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "ops/op_rule.h"

namespace gg {

namespace {
struct OpEntry {
  const char* name;
  int arity;
  const OpRule* rule;
};
const OpEntry op_table[] = {
#define OP(name, arity) {#name, arity, &name##_rule},
#include "ops/op_list.def"
#undef OP
};
static_assert(sizeof(op_table) / sizeof(op_table[0]) == op_count);
}  // namespace

const char* op_name(OpKind k) { return op_table[int(k)].name; }
int op_arity(OpKind k) { return op_table[int(k)].arity; }
const OpRule& op_rule(OpKind k) { return *op_table[int(k)].rule; }

const char* cmp_name(Cmp c) {
  static const char* names[] = {"lt", "le", "gt", "ge", "eq", "ne"};
  return names[int(c)];
}

std::string to_string(const Shape& s) {
  if (s.size() == 1) return fmt::format("({},)", s[0]);
  return fmt::format("({})", fmt::join(s, ", "));
}
const char* to_string(DType t) { return t == DType::f32 ? "f32" : "i32"; }

void check_failed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "gradgraph internal error: CHECK(%s) failed at %s:%d\n", cond, file, line);
  std::abort();
}

std::string site_string(const std::source_location& loc) {
  std::string f = loc.file_name();
  auto slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return fmt::format("{}:{}", f, loc.line());
}

std::string site_string(const Node& n) {
  const std::string outer = site_string(n.loc);
  const std::string inner = site_string(n.inner_loc);
  return inner == outer ? outer : fmt::format("{} > {}", outer, inner);
}

std::string Graph::scoped(const std::string& name) const {
  if (scope_.empty()) return name;
  if (name.empty()) return scope_;
  return scope_ + "." + name;
}

void Graph::fail(const Node& n, const std::string& msg) const {
  std::string who = n.name.empty() ? "" : fmt::format(" ('{}')", n.name);
  throw GraphError(fmt::format("{} at {}{}: {}", op_name(n.op), site_string(n.loc), who, msg));
}

NodeId Graph::add(OpKind op, std::vector<NodeId> inputs, Attrs attrs, std::string name,
                  std::source_location loc) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.name = std::move(name);
  n.loc = user_loc_.value_or(loc);
  n.inner_loc = inner_loc_.value_or(loc);
  int arity = op_arity(op);
  if (arity >= 0 && int(n.inputs.size()) != arity)
    fail(n, fmt::format("takes {} inputs, got {}", arity, n.inputs.size()));
  for (NodeId i : n.inputs)
    if (i < 0 || i >= size()) fail(n, fmt::format("input %{} is not a node of this graph", i));
  op_rule(op).infer(*this, n);
  nodes_.push_back(std::move(n));
  return NodeId(nodes_.size() - 1);
}

void Graph::add_check(NodeId id, std::string context, ValueCheck check) {
  if (id < 0 || id >= size()) throw GraphError(fmt::format("add_check: %{} is not a node of this graph", id));
  checks_.push_back({id, std::move(context), std::move(check)});
}

NodeId Graph::find(const std::string& name, OpKind op) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].op == op && nodes_[i].name == name) return NodeId(i);
  return -1;
}

NameScope::NameScope(Graph& g, const std::string& name, bool replace) : g_(g), saved_(g.scope_) {
  g.scope_ = replace ? name : g.scoped(name);
}
NameScope::~NameScope() { g_.scope_ = saved_; }

UserSite::UserSite(Graph& g, const std::source_location& loc, bool replace)
    : g_(g), saved_(g.user_loc_), saved_inner_(g.inner_loc_) {
  if (replace || !g.user_loc_) g.user_loc_ = loc;
  g.inner_loc_ = loc;
}
UserSite::~UserSite() {
  g_.user_loc_ = saved_;
  g_.inner_loc_ = saved_inner_;
}

std::vector<NodeId> ancestors(const Graph& g, const std::vector<NodeId>& roots) {
  std::vector<NodeId> out;
  if (roots.empty()) {
    for (NodeId i = 0; i < g.size(); ++i) out.push_back(i);
    return out;
  }
  std::vector<char> need(std::size_t(g.size()), 0);
  for (NodeId r : roots) need[std::size_t(r)] = 1;
  for (NodeId i = g.size() - 1; i >= 0; --i)
    if (need[std::size_t(i)])
      for (NodeId j : g.node(i).inputs) need[std::size_t(j)] = 1;
  for (NodeId i = 0; i < g.size(); ++i)
    if (need[std::size_t(i)]) out.push_back(i);
  return out;
}

namespace {
// The attributes worth showing for a node, e.g. "axis=1, keepdim".
std::string attr_text(const Node& n) {
  const Attrs& a = n.attrs;
  switch (n.op) {
    case OpKind::sum:
    case OpKind::max:
    case OpKind::argmax:
      return fmt::format("axis={}{}", a.axis, a.keepdim ? ", keepdim" : "");
    case OpKind::matmul:
      return a.trans_a && a.trans_b ? "trans_a, trans_b" : a.trans_a ? "trans_a" : a.trans_b ? "trans_b" : "";
    case OpKind::permute:
      return fmt::format("perm={}", to_string(a.dims));
    case OpKind::slice:
      return fmt::format("axis={}, {}:{}", a.axis, a.begin, a.end);
    case OpKind::concat:
    case OpKind::gather:
      return fmt::format("axis={}", a.axis);
    case OpKind::scatter_add:
      return fmt::format("axis={}, size={}", a.axis, a.end);
    case OpKind::compare:
      return cmp_name(a.cmp);
    case OpKind::constant:
      if (a.data && a.data->size() == 1) return fmt::format("{}", (*a.data)[0]);
      return "";
    case OpKind::param: {
      static const char* k[] = {"zeros", "ones", "normal", "uniform"};
      return fmt::format("init={}", k[a.init.kind]);
    }
    default:
      return "";
  }
}
}  // namespace

std::string to_text(const Graph& g, const std::vector<NodeId>& roots) {
  std::string s;
  for (NodeId id : ancestors(g, roots)) {
    const Node& n = g.node(id);
    std::string args;
    for (std::size_t i = 0; i < n.inputs.size(); ++i)
      args += fmt::format("{}%{}", i ? ", " : " ", n.inputs[i]);
    std::string at = attr_text(n);
    if (!at.empty()) args += fmt::format(" [{}]", at);
    std::string lhs = fmt::format("%{} = {}{}", id, op_name(n.op), args);
    s += fmt::format("{:<40} : {}{:<14}  # {}  {}\n", lhs, to_string(n.dtype), to_string(n.shape),
                     n.name.empty() ? "-" : n.name, site_string(n.loc));
  }
  return s;
}

std::string to_dot(const Graph& g, const std::vector<NodeId>& roots) {
  std::string s = "digraph gradgraph {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  for (NodeId id : ancestors(g, roots)) {
    const Node& n = g.node(id);
    bool leaf = n.inputs.empty();
    bool is_grad = n.name.rfind("grad(", 0) == 0;
    const char* color = n.op == OpKind::param ? "#cfe8ff" : leaf ? "#eeeeee" : is_grad ? "#ffe0cc" : "#ffffff";
    s += fmt::format("  n{} [label=\"%{} {}\\n{}{}\\n{}\", style=filled, fillcolor=\"{}\"];\n", id, id,
                     op_name(n.op), to_string(n.dtype), to_string(n.shape), n.name, color);
    for (NodeId j : n.inputs) s += fmt::format("  n{} -> n{};\n", j, id);
  }
  s += "}\n";
  return s;
}

}  // namespace gg
