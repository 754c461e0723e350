// The executor: its constructor runs the planning passes in order (ops/plan_*.cpp), and
// this file keeps what they share (the order, the steps, the options by name), the inputs'
// feeding and the outputs' reading. Running is in executor_run.cpp, reports in
// executor_report.cpp.
#include "ops/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace gg {

Executor::Executor(const Graph& g, std::vector<NodeId> outputs, ParamStore& params, std::uint64_t seed,
                   ExecutorOptions options)
    : user_g_(g),
      simplified_(prepare(g, outputs, options)),
      g_(options.simplify || options.remat ? simplified_.graph : g),
      params_(params),
      outputs_(simplified_.roots),
      options_(options),
      rng_(seed) {
  // The planning passes, in order: simplify and remat ran in the initializers (prepare);
  // each pass below reads its own switch in options_ and leaves the plan as it was when off.
  detect_anomaly_ = options.detect_anomaly;
  order_ = ancestors(g_, outputs_);
  number_order();
  plan_fusion();
  number_user_order();
  plan_slices();
  plan_locals();
  plan_in_place();
  plan_epilogues();
  std::vector<std::size_t> offset;
  std::vector<NodeId> root;
  plan_memory(offset, root);
  bind_views(offset, root);
  make_steps();
  const std::vector<int> step_at = step_index();
  bind_slices(step_at);
  bind_epilogues(step_at);
  plan_checks(step_of_, step_at);
}

void Executor::plan_fusion() {
  if (options_.fuse) fusion_ = fuse_elementwise(g_, order_, read_after_steps(), options_.compiled);
}

// Per step: the first node of the graph given that it computes.
void Executor::number_user_order() {
  user_order_.assign(order_.size(), -1);
  for (NodeId id = 0; id < user_g_.size(); ++id)
    if (const NodeId p = simplified_.map[std::size_t(id)]; p >= 0) {
      const int step = step_of_[std::size_t(p)];  // -1: a node the outputs do not need
      if (step >= 0 && user_order_[std::size_t(step)] < 0) user_order_[std::size_t(step)] = id;
    }
}

std::vector<NodeId> Executor::read_after_steps() const {
  std::vector<NodeId> ids = outputs_;
  for (const Graph::Check& c : g_.checks()) ids.push_back(c.node);
  return ids;
}

namespace {
// Each switch's name and member, in the order the passes run.
struct Switch {
  std::string_view name;
  bool ExecutorOptions::*member;
};
constexpr Switch kSwitches[] = {{"simplify", &ExecutorOptions::simplify}, {"remat", &ExecutorOptions::remat},
                                {"fuse", &ExecutorOptions::fuse},         {"slice", &ExecutorOptions::slice},
                                {"masked", &ExecutorOptions::masked},     {"in-place", &ExecutorOptions::in_place},
                                {"epilogue", &ExecutorOptions::epilogue}};
}  // namespace

const std::vector<std::string>& executor_switch_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Switch& s : kSwitches) v.emplace_back(s.name);
    return v;
  }();
  return names;
}

bool set_executor_switch(ExecutorOptions& o, std::string_view name, bool on) {
  for (const Switch& s : kSwitches)
    if (s.name == name) {
      o.*s.member = on;
      return true;
    }
  return false;
}

std::string switches_off(const ExecutorOptions& o) {
  std::string off;
  for (const Switch& s : kSwitches)
    if (!(o.*s.member)) off += (off.empty() ? "" : ",") + std::string(s.name);
  return off;
}

const std::vector<std::pair<std::string, unsigned>>& skip_work_names() {
  static const std::vector<std::pair<std::string, unsigned>> names = {{"products", skip_products},
                                                                      {"groups", skip_groups},
                                                                      {"ops", skip_ops},
                                                                      {"chain-products", skip_chain_products},
                                                                      {"chain-groups", skip_chain_groups}};
  return names;
}

int Executor::group_at(NodeId id) const { return fusion_.group_of.empty() ? -1 : fusion_.group_of[std::size_t(id)]; }

void Executor::number_order() {
  step_of_.assign(std::size_t(g_.size()), -1);
  for (std::size_t s = 0; s < order_.size(); ++s) step_of_[std::size_t(order_[s])] = int(s);
}

void Executor::bind_inputs(Step& st) {
  st.in.clear();
  for (NodeId in : reads(st)) st.in.push_back(views_[std::size_t(in)]);
}

// Per node of g_: the index in steps_ of the step that computes it, or -1.
std::vector<int> Executor::step_index() const {
  std::vector<int> at(std::size_t(g_.size()), -1);
  for (std::size_t t = 0; t < steps_.size(); ++t) at[std::size_t(steps_[t].id)] = int(t);
  return at;
}

// One step per computed node, in order: its kernel and its output view; a fused group is
// one step, where its root was.
void Executor::make_steps() {
  for (NodeId id : order_) {
    const Node& n = g_.node(id);
    if (op_bound_leaf(n.op)) continue;
    const int group = group_at(id);
    if (group >= 0 && fusion_.groups[std::size_t(group)].root != id) continue;  // inside its group's step
    Step st{id, group >= 0 ? nullptr : op_rule(n.op).kernel, group, {}, views_[std::size_t(id)], {}, {}};
    st.in_place = in_place_step_[std::size_t(id)] != 0;
    GG_CHECK(st.kernel != nullptr || group >= 0);
    if (group >= 0)
      for (NodeId m : fusion_.groups[std::size_t(group)].stored) st.stored.push_back(views_[std::size_t(m)]);
    steps_.push_back(std::move(st));
  }
}

bool Executor::never_stored(NodeId id) const {
  const int gi = group_at(id);
  if (gi < 0) return false;
  const FusedGroup& grp = fusion_.groups[std::size_t(gi)];
  return grp.root != id && std::find(grp.stored.begin(), grp.stored.end(), id) == grp.stored.end();
}

const std::vector<NodeId>& Executor::reads(const Step& st) const {
  return st.group >= 0 ? fusion_.groups[std::size_t(st.group)].inputs : g_.node(st.id).inputs;
}

// Checks the outputs, then simplifies what they need, or (off) maps every id to itself;
// then (on) rematerializes.
Simplified Executor::prepare(const Graph& g, const std::vector<NodeId>& outputs, const ExecutorOptions& options) {
  for (NodeId o : outputs)
    if (o < 0 || o >= g.size())
      throw GraphError(fmt::format("Executor: output %{} is not a node of this graph (it has {} nodes); was it built "
                                   "in another graph?", o, g.size()));
  Simplified s;
  if (options.simplify) {
    s = gg::simplify(g, outputs, {.keep_stop_gradient = false});
  } else {
    s.map.resize(std::size_t(g.size()));
    for (NodeId i = 0; i < g.size(); ++i) s.map[std::size_t(i)] = i;
    s.roots = outputs;
  }
  if (options.remat) {  // then the copies: the map goes through both passes
    Rematerialized r = gg::rematerialize(options.simplify ? s.graph : g, s.roots);
    for (NodeId& m : s.map)
      if (m >= 0) m = r.map[std::size_t(m)];
    s.graph = std::move(r.graph);
    s.roots = std::move(r.roots);
  }
  return s;
}

NodeId Executor::planned_id(NodeId user_id) const {
  return user_id < 0 || std::size_t(user_id) >= simplified_.map.size() ? NodeId(-1) : simplified_.map[std::size_t(user_id)];
}

// Each value check of a planned node runs after the step that computes it (leaves: first).
void Executor::plan_checks(const std::vector<int>& step_of, const std::vector<int>& step_index) {
  const auto& checks = g_.checks();
  for (std::size_t c = 0; c < checks.size(); ++c) {
    const std::size_t id = std::size_t(checks[c].node);
    if (step_of[id] < 0) continue;  // not in this plan
    if (step_index[id] >= 0) steps_[std::size_t(step_index[id])].checks.push_back(c);
    else leaf_checks_.push_back(c);
  }
}

void Executor::run_check(std::size_t c) const {
  const Graph::Check& ck = g_.checks()[c];
  View v = views_[std::size_t(ck.node)];
  std::string problem = ck.check(v);
  if (!problem.empty()) throw GraphError(fmt::format("{}: {}", ck.context, problem));
}

bool Executor::has_input(const std::string& name) const {
  for (NodeId id : order_)
    if (g_.node(id).op == OpKind::input && g_.node(id).name == name) return true;
  return false;
}

void Executor::feed(const std::string& name, const void* data, std::int64_t count, DType dtype, const Shape* shape) {
  for (NodeId id : order_) {
    const Node& n = g_.node(id);
    if (n.op != OpKind::input || n.name != name) continue;
    if ((shape ? *shape != n.shape : count != numel(n.shape)) || dtype != n.dtype)
      throw GraphError(fmt::format("input '{}' declared at {} as {}{} was fed {}", name, site_string(n.loc),
                                   to_string(n.dtype), to_string(n.shape),
                                   shape ? fmt::format("{}{}", to_string(dtype), to_string(*shape))
                                         : fmt::format("{} {} values", count, to_string(dtype))));
    std::memcpy(inputs_[std::size_t(id)].data(), data, std::size_t(count) * 4);
    input_fed_[std::size_t(id)] = 1;
    return;
  }
  std::vector<std::string> declared;
  for (const Node& n : user_g_.nodes()) {
    if (n.op != OpKind::input) continue;
    if (n.name == name)
      throw GraphError(fmt::format("input '{}' declared at {} is not used by the requested outputs of this plan; "
                                   "feed only the inputs it needs (has_input() tells)", name, site_string(n.loc)));
    declared.push_back(n.name);
  }
  throw GraphError(fmt::format("no input '{}' in this graph{}", name, did_you_mean(name, declared)));
}

void Executor::set_input(const std::string& name, const Tensor& t) {
  feed(name, t.data(), t.numel(), t.dtype(), &t.shape());
}
void Executor::set_input(const std::string& name, std::span<const float> values) {
  feed(name, values.data(), std::int64_t(values.size()), DType::f32, nullptr);
}
void Executor::set_input(const std::string& name, std::span<const std::int32_t> values) {
  feed(name, values.data(), std::int64_t(values.size()), DType::i32, nullptr);
}

View Executor::value(NodeId user_id) const {
  const NodeId id = planned_id(user_id);
  if (id < 0 || !kept_[std::size_t(id)])
    throw GraphError(fmt::format("node %{} is not an output of this plan; ask for it when building the executor", user_id));
  View v = views_[std::size_t(id)];
  if (g_.node(id).op == OpKind::param) v.data = const_cast<Tensor&>(params_.at(g_.node(id).name)).data();
  return v;
}

Tensor Executor::get(NodeId id) const {
  View v = value(id);
  Tensor t(*v.shape, v.dtype);
  std::memcpy(t.data(), v.data, std::size_t(t.numel()) * 4);
  return t;
}

}  // namespace gg
