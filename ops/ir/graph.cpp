// The graph container: node construction through the op table, name scopes, user call
// sites, error formatting and the text/dot listings.
#include "ops/ir/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <cstdio>
#include <cstdint>
#include <cstdlib>

#include "ops/ir/op_rule.h"

namespace gg {

namespace {
struct OpEntry {
  const char* name;
  const OpRule* rule;
};
const OpEntry op_table[] = {
#define OP(name, arity, family) {#name, &name##_rule},
#include "ops/ir/op_list.def"
#undef OP
};
static_assert(sizeof(op_table) / sizeof(op_table[0]) == op_count);
}  // namespace

const char* op_name(OpKind k) { return op_table[int(k)].name; }

const OpRule& op_rule(OpKind k) { return *op_table[int(k)].rule; }

bool constant_all(const Node& n, float v) {
  if (n.op != OpKind::constant || n.dtype != DType::f32) return false;
  for (float x : *n.attrs.data)
    if (x != v) return false;
  return true;
}

NodeId same_value_as(const Graph& t, const Node& n, NodeId x) {
  return t.node(x).shape == n.shape && t.node(x).dtype == n.dtype ? x : NodeId(-1);
}

bool op_arithmetic(OpKind k) { return op_class(k) == OpClass::elementwise; }
bool op_elementwise(OpKind k) { return op_arithmetic(k) || op_class(k) == OpClass::selection; }
bool op_bound_leaf(OpKind k) { return op_class(k) == OpClass::bound_leaf; }

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

namespace {
std::string join_scope(const std::string& scope, const std::string& name) {
  if (scope.empty()) return name;
  if (name.empty()) return scope;
  return scope + "." + name;
}
}  // namespace

std::string Graph::scoped(const std::string& name) const { return join_scope(scope_, name); }
std::string Graph::param_scoped(const std::string& name) const { return join_scope(param_scope_, name); }

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
  if (bf16_products_ && op_rule(op).cls == OpClass::product && n.dtype == DType::f32) n.attrs.bf16 = true;
  by_name_[n.name].push_back(NodeId(nodes_.size()));
  nodes_.push_back(std::move(n));
  return NodeId(nodes_.size() - 1);
}

void Graph::set_name(NodeId id, std::string name) {
  std::string& old = nodes_[std::size_t(id)].name;
  std::erase(by_name_[old], id);
  std::vector<NodeId>& ids = by_name_[name];
  ids.insert(std::lower_bound(ids.begin(), ids.end(), id), id);
  old = std::move(name);
}

void Graph::add_check(NodeId id, std::string context, ValueCheck check) {
  if (id < 0 || id >= size()) throw GraphError(fmt::format("add_check: %{} is not a node of this graph", id));
  checks_.push_back({id, std::move(context), std::move(check)});
}

NodeId Graph::find(const std::string& name, OpKind op) const {
  auto it = by_name_.find(name);  // an index, not a scan: models declare thousands of parameters
  if (it == by_name_.end()) return -1;
  for (NodeId id : it->second)
    if (nodes_[std::size_t(id)].op == op) return id;
  return -1;
}

NameScope::NameScope(Graph& g, const std::string& name, bool replace)
    : g_(g), saved_(g.scope_), saved_param_(g.param_scope_), saved_step_(g.step_) {
  g.scope_ = replace ? name : g.scoped(name);
  g.param_scope_ = replace ? name : g.param_scoped(name);
  if (replace) g.step_.clear();
}
NameScope::~NameScope() {
  g_.scope_ = saved_;
  g_.param_scope_ = saved_param_;
  g_.step_ = saved_step_;
}

std::string step_key(const std::string& name) {
  std::string key;
  for (char c : name) {
    const bool digit = c >= '0' && c <= '9';
    if (!digit) key += c;
    else if (key.empty() || key.back() != '#') key += '#';
  }
  return key;
}

StepScope::StepScope(Graph& g, const std::string& name) : g_(g), saved_(g.scope_), saved_step_(g.step_) {
  if (name.empty()) throw GraphError("StepScope: a step needs a name (e.g. \"step.3\")");
  g.scope_ = g.scoped(name);
  g.step_ = g.scope_;
  if (std::find(g.steps_.begin(), g.steps_.end(), g.scope_) == g.steps_.end()) g.steps_.push_back(g.scope_);
  const Graph::StepPattern p{g.param_scope_, step_key(name)};
  if (std::find(g.step_patterns_.begin(), g.step_patterns_.end(), p) == g.step_patterns_.end())
    g.step_patterns_.push_back(p);
}
StepScope::StepScope(Graph& g, const std::string& name, std::int64_t index)
    : StepScope(g, fmt::format("{}.{}", name, index)) {}
StepScope::~StepScope() {
  g_.scope_ = saved_;
  g_.step_ = saved_step_;
}

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
// The attributes worth showing for a node, e.g. "axis=1, keepdim" (its record's).
std::string attr_text(const Node& n) {
  const auto text = op_rule(n.op).attr_text;
  return text ? text(n) : std::string();
}
}  // namespace

std::string to_text_line(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string args;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) args += fmt::format("{}%{}", i ? ", " : " ", n.inputs[i]);
  std::string at = attr_text(n);
  if (n.attrs.no_grad) at += at.empty() ? "stop_gradient" : ", stop_gradient";
  if (!at.empty()) args += fmt::format(" [{}]", at);
  std::string lhs = fmt::format("%{} = {}{}", id, op_name(n.op), args);
  return fmt::format("{:<40} : {}{:<14}  # {}  {}\n", lhs, to_string(n.dtype), to_string(n.shape),
                     n.name.empty() ? "-" : n.name, site_string(n));
}

std::string to_text(const Graph& g, const std::vector<NodeId>& roots) {
  std::string s;
  for (NodeId id : ancestors(g, roots)) s += to_text_line(g, id);
  return s;
}

namespace {

// The scopes a node is in, outermost first, its own name last: "blocks.1.attn.query" is in
// "blocks.1", "blocks.1.attn", "blocks.1.attn.query" (a number joins the part before it);
// "grad(blocks.1.attn)" is in "grad:blocks.1", "grad:blocks.1.attn".
std::vector<std::string> scope_chain(const std::string& name) {
  std::string base = name, prefix;
  if (name.size() > 6 && name.rfind("grad(", 0) == 0 && name.back() == ')') {
    base = name.substr(5, name.size() - 6);
    prefix = "grad:";
  }
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at <= base.size()) {
    std::size_t dot = base.find('.', at);
    if (dot == std::string::npos) dot = base.size();
    std::string part = base.substr(at, dot - at);
    const bool number = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    if (number && !parts.empty()) parts.back() += "." + part;
    else parts.push_back(part);
    at = dot + 1;
  }
  std::vector<std::string> chain;
  std::string cur;
  for (const std::string& p : parts) {
    if (p.empty()) break;
    cur += (cur.empty() ? "" : ".") + p;
    chain.push_back(prefix + cur);
  }
  return chain;
}

// `s` is `t` or inside it ("blocks.1.attn" is inside "blocks.1"), ignoring "grad:".
bool within(std::string s, std::string t) {
  auto strip = [](std::string& x) {
    if (x.rfind("grad:", 0) == 0) x = x.substr(5);
  };
  strip(s), strip(t);
  return s == t || (s.size() > t.size() && s.compare(0, t.size(), t) == 0 && s[t.size()] == '.');
}

std::string dot_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

std::vector<std::string> scopes_of(const Graph& g, const std::vector<NodeId>& roots) {
  std::vector<std::string> out;
  for (NodeId id : ancestors(g, roots))
    for (const std::string& s : scope_chain(g.node(id).name))
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  return out;
}

namespace {

// to_dot's writer: the scope tree of the drawn nodes, then the statements, scope by scope
// (a collapsed scope is one box, a run of collapsed steps too), then the edges between
// the units drawn (a node, or the box that holds it).
class DotWriter {
 public:
  DotWriter(const Graph& g, const std::vector<NodeId>& roots, const DotOptions& o)
      : g_(g), o_(o), ids_(ancestors(g, roots)), unit_(std::size_t(g.size())) {
    collapse_ = o.collapse.value_or(ids_.size() > o.collapse_above);
    for (const std::string& st : g.step_scopes()) steps_.insert(st);
    build_tree();
    check_expand();
  }

  std::string write() {
    s_ = "digraph gradgraph {\n  rankdir=TB;\n  compound=true;\n"
         "  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
    emit_list(top_, "  ");
    for (NodeId id : loose_) node_stmt(id, "  ");
    std::set<std::pair<std::string, std::string>> edges;
    for (NodeId id : ids_)
      for (NodeId j : g_.node(id).inputs) {
        const std::string& a = unit_[std::size_t(j)];
        const std::string& b = unit_[std::size_t(id)];
        if (a != b && edges.emplace(a, b).second) s_ += fmt::format("  {} -> {};\n", a, b);
      }
    s_ += "}\n";
    return s_;
  }

 private:
  // A scope's nodes: its own (direct) and its sub-scopes', counted in total.
  struct Scope {
    std::vector<NodeId> direct;
    std::vector<std::string> children;
    std::size_t total = 0;
  };

  void build_tree() {
    for (NodeId id : ids_) {
      const std::vector<std::string> chain = scope_chain(g_.node(id).name);
      if (chain.empty()) {
        loose_.push_back(id);
        continue;
      }
      for (std::size_t k = 0; k < chain.size(); ++k) {
        auto [it, fresh] = scopes_.try_emplace(chain[k]);
        ++it->second.total;
        if (fresh) (k == 0 ? top_ : scopes_[chain[k - 1]].children).push_back(chain[k]);
      }
      scopes_[chain.back()].direct.push_back(id);
    }
  }

  void check_expand() const {
    for (const std::string& e : o_.expand) {
      bool found = false;
      for (const auto& [name, sc] : scopes_) found = found || within(name, e);
      if (found) continue;
      std::vector<std::string> names;
      for (const auto& kv : scopes_) names.push_back(kv.first);
      throw GraphError(fmt::format("to_dot: no scope '{}' among the drawn nodes{}", e, did_you_mean(e, names)));
    }
  }

  bool expanded(const std::string& scope) const {
    if (!collapse_) return true;
    for (const std::string& e : o_.expand)
      if (within(scope, e) || within(e, scope)) return true;
    return false;
  }
  // A step scope (Graph::step_scopes) or the gradient's scope of one.
  bool is_step(const std::string& scope) const {
    return steps_.count(scope.rfind("grad:", 0) == 0 ? scope.substr(5) : scope) > 0;
  }

  void node_stmt(NodeId id, const std::string& indent) {
    const Node& n = g_.node(id);
    const bool leaf = n.inputs.empty();
    const bool is_grad = n.name.rfind("grad(", 0) == 0;
    const char* color = n.op == OpKind::param ? "#cfe8ff" : leaf ? "#eeeeee" : is_grad ? "#ffe0cc" : "#ffffff";
    unit_[std::size_t(id)] = fmt::format("n{}", id);
    s_ += fmt::format("{}n{} [label=\"%{} {}{}\\n{}{}\\n{}\", style=filled, fillcolor=\"{}\"];\n", indent, id, id,
                      op_name(n.op), n.attrs.no_grad ? " [stop_gradient]" : "", to_string(n.dtype), to_string(n.shape),
                      dot_escape(n.name), color);
  }

  // One box standing for every node of `members` (scopes), labelled `label`.
  void box(const std::vector<std::string>& members, const std::string& label, const std::string& indent) {
    const std::string name = fmt::format("s{}", next_cluster_++);
    std::function<void(const std::string&)> claim = [&](const std::string& sub) {
      for (NodeId id : scopes_.at(sub).direct) unit_[std::size_t(id)] = name;
      for (const std::string& c : scopes_.at(sub).children) claim(c);
    };
    for (const std::string& m : members) claim(m);
    const bool is_grad = members[0].rfind("grad:", 0) == 0;
    s_ += fmt::format("{}{} [label=\"{}\", shape=box3d, style=filled, fillcolor=\"{}\"];\n", indent, name, label,
                      is_grad ? "#ffd0b0" : "#e0f0e0");
  }

  // Sibling scopes in order; collapsed steps of one pattern ("step.#") that no expanded step
  // separates are drawn as one box where the first of them is.
  void emit_list(const std::vector<std::string>& names, const std::string& indent) {
    std::set<std::string> done;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (done.count(names[i])) continue;
      std::vector<std::string> run{names[i]};
      if (is_step(names[i]) && !expanded(names[i])) {
        const std::string key = step_key(names[i]);
        for (std::size_t j = i + 1; j < names.size(); ++j) {
          if (!is_step(names[j]) || step_key(names[j]) != key) continue;
          if (expanded(names[j])) break;
          run.push_back(names[j]);
        }
      }
      if (run.size() == 1) {
        emit(names[i], indent);
        continue;
      }
      std::size_t total = 0;
      for (const std::string& m : run) total += scopes_.at(m).total, done.insert(m);
      box(run, fmt::format("{} .. {}\\n({} steps, {} nodes)", dot_escape(run.front()), dot_escape(run.back()),
                           run.size(), total), indent);
    }
  }

  void emit(const std::string& name, const std::string& indent) {
    const Scope& sc = scopes_.at(name);
    if (sc.total == 1 && !sc.direct.empty()) return node_stmt(sc.direct[0], indent);
    if (!expanded(name)) return box({name}, fmt::format("{}\\n({} nodes)", dot_escape(name), sc.total), indent);
    s_ += fmt::format("{}subgraph cluster_{} {{\n{}  label=\"{}\";\n{}  style=rounded;\n", indent, next_cluster_++,
                      indent, dot_escape(name), indent);
    emit_list(sc.children, indent + "  ");
    for (NodeId id : sc.direct) node_stmt(id, indent + "  ");
    s_ += indent + "}\n";
  }

  const Graph& g_;
  const DotOptions& o_;
  const std::vector<NodeId> ids_;
  bool collapse_ = false;
  std::set<std::string> steps_;
  std::map<std::string, Scope> scopes_;
  std::vector<std::string> top_;     // outermost scopes, in order of first node
  std::vector<NodeId> loose_;        // nodes in no scope
  std::vector<std::string> unit_;    // per node: what it is drawn as ("n7", or its box "s3")
  std::string s_;
  int next_cluster_ = 0;
};

}  // namespace

std::string to_dot(const Graph& g, const std::vector<NodeId>& roots, const DotOptions& o) {
  return DotWriter(g, roots, o).write();
}

namespace {
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::vector<std::string> closest_names(const std::string& name, const std::vector<std::string>& names) {
  std::vector<std::string> close;
  if (name.size() > 200) return close;  // edit distance is quadratic: no suggestion for huge names
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  std::size_t best = SIZE_MAX;
  for (const std::string& n : names) {
    const std::size_t d = edit_distance(name, n);
    if (d > limit || d > best) continue;
    if (d < best) close.clear();
    best = d;
    if (std::find(close.begin(), close.end(), n) == close.end()) close.push_back(n);
  }
  return close;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& names) {
  const std::vector<std::string> close = closest_names(name, names);
  if (close.empty()) return "";
  return fmt::format("; did you mean '{}'?", fmt::join(close, "' or '"));
}

}  // namespace gg
