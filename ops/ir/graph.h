// The IR: a graph is a list of nodes, each an op applied to earlier nodes, with its
// inferred shape and dtype, a scoped user name and the user's source line. Building a
// node runs the op's shape rule at once, so mistakes surface where the user wrote them.
// Nothing here computes values: that is the executor's job (ops/runtime/executor.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "shape.h"

namespace gg {

enum class OpKind : std::uint8_t {
#define OP(name, arity, family) name,
#include "op_list.def"
#undef OP
};
inline constexpr int op_count = 0
#define OP(name, arity, family) +1
#include "op_list.def"
#undef OP
    ;

const char* op_name(OpKind k);
constexpr int op_arity(OpKind k) {  // -1: any number of inputs
  constexpr int arity[] = {
#define OP(name, n, family) n,
#include "op_list.def"
#undef OP
  };
  return arity[int(k)];
}
// The element-wise primitives (their records' class, ops/ir/op_rule.h): each output value
// depends only on the operands' values at the same (broadcast) position. op_arithmetic:
// the unary and binary ones of op_list.def; op_elementwise: those and compare and where.
bool op_elementwise(OpKind k);
bool op_arithmetic(OpKind k);
// Leaves whose value exists before any step runs: input, param and constant (not random,
// which is drawn by a step of its own).
bool op_bound_leaf(OpKind k);

using NodeId = std::int32_t;

enum class Cmp : std::uint8_t { lt, le, gt, ge, eq, ne };
const char* cmp_name(Cmp c);

// How a parameter is initialized when a store first meets it.
struct Init {
  enum Kind : std::uint8_t { zeros, ones, normal, uniform } kind = zeros;
  float a = 0.f, b = 0.f;  // normal: mean a, std b; uniform: [a, b)
};

// Op attributes; each op reads only the fields its rule documents. `no_grad` is the one
// field of any node (no kernel reads it): see op::stop_gradient (ops/ir/build.h).
struct Attrs {
  Shape dims;                // reshape/expand: target shape; permute: the permutation
  std::int64_t axis = 0;     // sum, max, slice, concat, gather, scatter_add
  std::int64_t begin = 0;    // slice
  std::int64_t end = 0;      // slice; scatter_add: size of the output along axis
  bool keepdim = false;      // sum, max
  bool trans_a = false;      // matmul: use A^T
  bool trans_b = false;      // matmul: use B^T
  // A product (matmul): its operands rounded to bf16 and its sums kept in f32 (mixed
  // precision; ops/cpu/bf16.h). Set on every product built inside a Bf16Products scope.
  bool bf16 = false;
  Cmp cmp = Cmp::eq;         // compare
  float scale = 1.f;         // attention, attention_back: the factor of the scores q k^T
  Init init;                 // param
  DType dtype = DType::f32;  // input, constant: the leaf's dtype
  std::shared_ptr<const std::vector<float>> data;  // constant (f32 values, or i32 values stored as float)
  // Any op: no gradient flows through this node into its inputs (PyTorch's detach, JAX's
  // stop_gradient). The value is unchanged; grad() treats the node as a leaf that does
  // not depend on anything, and its forward-mode tangent is zero (ops/ir/tangent.h).
  bool no_grad = false;
};

struct Node {
  OpKind op;
  std::vector<NodeId> inputs;
  Attrs attrs;
  Shape shape;
  DType dtype = DType::f32;
  std::string name;          // scoped user name, e.g. "blocks.1.attn.query"
  std::source_location loc;  // where the user asked for it (the outermost call site)
  // The innermost call site: inside a composite, the composite's own line (nn.cpp:120);
  // equal to loc for a node the user built directly.
  std::source_location inner_loc;
  // The leaves generic passes (gradcheck, optimizers) may ask about without naming ops.
  bool is_param() const { return op == OpKind::param; }
  bool is_input() const { return op == OpKind::input; }
};

// The one error type for mistakes in a model declaration (and in data fed to it).
// Message: "<op> at <file>:<line> ('<name>'): <problem>".
class GraphError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Internal invariant check for bugs (never for user errors).
#define GG_CHECK(cond)                                                                 \
  do {                                                                                 \
    if (!(cond)) ::gg::check_failed(#cond, __FILE__, __LINE__);                        \
  } while (0)
[[noreturn]] void check_failed(const char* cond, const char* file, int line);

struct View;  // a value as a kernel sees it (ops/ir/op_rule.h)

// A run-time check of a node's value: returns "" when the value is acceptable, else the
// problem ("every value is the ignore index -1: ..."). Attached with Graph::add_check.
using ValueCheck = std::function<std::string(const View&)>;

class Graph {
 public:
  // Appends a node after checking it with the op's shape rule; throws GraphError.
  NodeId add(OpKind op, std::vector<NodeId> inputs, Attrs attrs = {}, std::string name = {},
             std::source_location loc = std::source_location::current());

  const Node& node(NodeId id) const { return nodes_[std::size_t(id)]; }
  // A deque: references to nodes stay valid while more are appended (gradient rules rely on it).
  const std::deque<Node>& nodes() const { return nodes_; }
  std::int32_t size() const { return std::int32_t(nodes_.size()); }

  // Scoped names: nodes built while a scope is open get "<outer>.<inner>" as name.
  const std::string& scope() const { return scope_; }
  std::string scoped(const std::string& name) const;
  // Parameters are named in the parameter scope: the scope without its step scopes
  // (StepScope below), so that every step of an unrolled loop declares the same weights.
  const std::string& param_scope() const { return param_scope_; }
  std::string param_scoped(const std::string& name) const;
  // The innermost step scope open, by its full name ("enc.step.3"), or "".
  const std::string& step_scope() const { return step_; }
  // Every step scope opened so far, by full name, in the order first opened: to_dot draws
  // runs of them as one box. Passes that rebuild a graph copy them (set_step_scopes).
  const std::vector<std::string>& step_scopes() const { return steps_; }
  void set_step_scopes(std::vector<std::string> steps) { steps_ = std::move(steps); }
  // Where the steps' names repeat: (parameter scope, step name with its digits as '#'),
  // e.g. ("", "step.#"): how op::param recognizes a per-step copy of a shared weight.
  struct StepPattern {
    std::string param_scope, key;
    bool operator==(const StepPattern&) const = default;
  };
  const std::vector<StepPattern>& step_patterns() const { return step_patterns_; }
  // The parameters declared inside a step scope (shared by the steps), each with the step
  // scope it was first declared in.
  const std::unordered_map<std::string, std::string>& step_params() const { return step_params_; }
  void note_step_param(const std::string& name) { step_params_.try_emplace(name, step_); }

  // The user's source line: while set, every node records it instead of its own.
  const std::optional<std::source_location>& user_loc() const { return user_loc_; }
  // The innermost call site open (the composite's own line), recorded as Node::inner_loc.
  const std::optional<std::source_location>& inner_loc() const { return inner_loc_; }

  // Throws GraphError "<op> at <file>:<line> ('<name>'): <msg>" for a node being built.
  [[noreturn]] void fail(const Node& n, const std::string& msg) const;

  // Renames a node (names are metadata: nothing depends on them but errors and listings).
  void set_name(NodeId id, std::string name);
  // Sets a node's two source lines (passes that rebuild a graph keep the original's).
  void set_site(NodeId id, std::source_location loc, std::source_location inner_loc) {
    nodes_[std::size_t(id)].loc = loc;
    nodes_[std::size_t(id)].inner_loc = inner_loc;
  }

  // First node named `name` with the given op, or -1.
  NodeId find(const std::string& name, OpKind op) const;

  // Attaches a value check to node `id`. Every executor whose plan contains the node runs
  // it on each run, right after the node's value is ready (leaves: before the first step),
  // and throws GraphError("<context>: <problem>") when it reports a problem. This is how a
  // composite refuses data that would silently give a wrong result (cross_entropy with
  // every target ignored) without the executor knowing the composite.
  struct Check {
    NodeId node;
    std::string context;  // "<what> at <file>:<line> ('<name>')"
    ValueCheck check;
  };
  void add_check(NodeId id, std::string context, ValueCheck check);
  const std::vector<Check>& checks() const { return checks_; }

 private:
  friend class NameScope;
  friend class StepScope;
  friend class UserSite;
  std::deque<Node> nodes_;
  std::unordered_map<std::string, std::vector<NodeId>> by_name_;  // for find(): ids in increasing order
  std::vector<Check> checks_;
  std::string scope_, param_scope_, step_;
  std::vector<std::string> steps_;
  std::vector<StepPattern> step_patterns_;
  std::unordered_map<std::string, std::string> step_params_;
  std::optional<std::source_location> user_loc_, inner_loc_;
  bool bf16_products_ = false;  // Bf16Products: products built now take bf16 operands

 public:
  // Whether products built now take bf16 operands (a Bf16Products scope is open).
  bool bf16_products() const { return bf16_products_; }

 private:
  friend class Bf16Products;
  std::optional<bool> fused_attention_;  // FusedAttention: the innermost one open, if any

 public:
  // Whether a FusedAttention scope is open, and its choice.
  const std::optional<bool>& fused_attention() const { return fused_attention_; }

 private:
  friend class FusedAttention;
};

// RAII: every product (an op whose record's class is OpClass::product: matmul) built while
// it is open rounds its operands to bf16 and sums in f32 (Attrs::bf16), forward and
// gradient alike when the gradient is built inside it too; listings show "bf16" on each.
// Everything else (element-wise ops, reductions, the statistics of norms and softmax)
// stays f32. With on = false it closes an enclosing scope for a part (a head kept in f32).
class Bf16Products {
 public:
  explicit Bf16Products(Graph& g, bool on = true) : g_(g), was_(g.bf16_products_) { g.bf16_products_ = on; }
  ~Bf16Products() { g_.bf16_products_ = was_; }
  Bf16Products(const Bf16Products&) = delete;
  Bf16Products& operator=(const Bf16Products&) = delete;

 private:
  Graph& g_;
  bool was_;
};

// RAII: while open, dsl::attention builds the fused attention primitive (on) or its
// composition of primitives (off) where its options leave the choice open (dsl/nn.h's
// AttentionOptions::fused); with none open, GG_FUSED_ATTENTION decides, else the size.
// train::Model opens one around each graph it builds (Model::set_fused_attention).
class FusedAttention {
 public:
  FusedAttention(Graph& g, bool on) : g_(g), was_(g.fused_attention_) { g.fused_attention_ = on; }
  ~FusedAttention() { g_.fused_attention_ = was_; }
  FusedAttention(const FusedAttention&) = delete;
  FusedAttention& operator=(const FusedAttention&) = delete;

 private:
  Graph& g_;
  std::optional<bool> was_;
};

// RAII: opens a name scope ("blocks.1" then "attn" gives "blocks.1.attn") for nodes and
// parameters alike: a layer's weights are its own ("blocks.1.attn.query.weight"). With
// replace, the scope is exactly `name` (the reverse pass names nodes "grad(<name>)").
class NameScope {
 public:
  NameScope(Graph& g, const std::string& name, bool replace = false);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;

 private:
  Graph& g_;
  std::string saved_, saved_param_, saved_step_;
};

// RAII: opens a step scope, which names nodes but not parameters (TensorFlow 1's
// name_scope beside its variable_scope): in an unrolled loop, each step's nodes are named
// "step.3.gru.hh" while the weights it declares stay "gru.hh.weight", one for every step.
// StepScope(g, "step", 3) is StepScope(g, "step.3"). Re-declaring a shared weight under a
// plain NameScope named like a step ("step.4") is a GraphError (see op::param), not a copy.
class StepScope {
 public:
  StepScope(Graph& g, const std::string& name);
  StepScope(Graph& g, const std::string& name, std::int64_t index);
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  Graph& g_;
  std::string saved_, saved_step_;
};

// The step pattern of a scope name: each run of digits as '#' ("step.12" -> "step.#").
std::string step_key(const std::string& name);

// RAII: records the user's call site for every node built inside; the outermost wins,
// so a composite reports the line where the user called it. With replace, `loc` wins.
// The innermost site is recorded too (Node::inner_loc): the composite's own line.
class UserSite {
 public:
  UserSite(Graph& g, const std::source_location& loc, bool replace = false);
  ~UserSite();
  UserSite(const UserSite&) = delete;
  UserSite& operator=(const UserSite&) = delete;

 private:
  Graph& g_;
  std::optional<std::source_location> saved_, saved_inner_;
};

// "model.cpp:42": the file's base name and line.
std::string site_string(const std::source_location& loc);
// "model.cpp:63 > nn.cpp:120" when the node's inner line differs from its user line, else "model.cpp:63".
std::string site_string(const Node& n);

// A readable listing, one node a line, SSA-style:
//   %7 = matmul %5, %6 [trans_b]  : f32(2, 4, 8)  # blocks.0.attn.query  model.cpp:42 > nn.cpp:77
// (the user's line, then the composite's own line when the node was built inside one).
// Only the nodes that `roots` need (all nodes when roots is empty).
std::string to_text(const Graph& g, const std::vector<NodeId>& roots = {});
// One line of that listing (with its newline).
std::string to_text_line(const Graph& g, NodeId id);

// How to_dot draws name scopes ("blocks.1", then "blocks.1.attn"; gradient nodes named
// "grad(<name>)" go to the scopes "grad:<scope>").
struct DotOptions {
  // Draw each scope as one box (its node count in the label) instead of its nodes, and
  // the steps of a loop (StepScope, and their gradient's scopes) as one box per run of
  // steps: "step.0 .. step.31 (32 steps, 800 nodes)".
  // Unset: collapse when more than `collapse_above` nodes are drawn.
  std::optional<bool> collapse;
  std::size_t collapse_above = 150;
  // Scopes to draw node by node even when collapsed (with their enclosing scopes opened
  // and the matching gradient scope too), e.g. "blocks.1.attn", or a step, "step.5",
  // which splits the run of steps around it.
  std::vector<std::string> expand;
};
// Graphviz dot of the nodes that `roots` need: one cluster per name scope. Throws
// GraphError for an `expand` scope no drawn node is in (naming the closest scopes).
std::string to_dot(const Graph& g, const std::vector<NodeId>& roots = {}, const DotOptions& options = {});
// The name scopes of the nodes `roots` need, outermost first within each chain.
std::vector<std::string> scopes_of(const Graph& g, const std::vector<NodeId>& roots = {});

// "; did you mean 'a' or 'b'?" with the names closest to `name`, or "" when none is close.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& names);
// The names of `names` nearest to `name` by edit distance, at most a third of its length
// apart (at least 2), in their order; none for a name over 200 characters.
std::vector<std::string> closest_names(const std::string& name, const std::vector<std::string>& names);

// Ids of the nodes that `roots` depend on (roots included), in increasing order.
std::vector<NodeId> ancestors(const Graph& g, const std::vector<NodeId>& roots);

}  // namespace gg
