// The executor: its constructor makes the plan (ops/passes/plan.h) and binds it (the arena
// and views, the steps, the chains' per-slice views, epilogues and checks: binding is in
// executor_bind.cpp); this file keeps the inputs' feeding and the outputs' reading.
// Running is in executor_run.cpp, reports in executor_report.cpp.
#include "ops/runtime/executor.h"

#include "ops/passes/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace gg {

Executor::Executor(const Graph& g, std::vector<NodeId> outputs, ParamStore& params, std::uint64_t seed,
                   ExecutorOptions options)
    : user_g_(g),
      plan_(std::make_unique<const Plan>(make_plan(g, outputs, options))),
      g_(plan_->g()),
      fusion_(plan_->fusion),
      params_(params),
      options_(options),
      rng_(seed) {
  detect_anomaly_ = options.detect_anomaly;
  bind_memory();
  make_steps();
  const std::vector<int> step_at = step_index();
  bind_slices(step_at);
  bind_epilogues(step_at);
  bind_checks(step_at);
}

Executor::~Executor() = default;

std::size_t Executor::arena_bytes() const { return plan_->arena_bytes; }
std::size_t Executor::unshared_bytes() const { return plan_->unshared_bytes; }
const std::vector<NodeId>& Executor::order() const { return plan_->user_order; }
const Fusion& Executor::fusion() const { return fusion_; }

const std::vector<std::pair<std::string, unsigned>>& skip_work_names() {
  static const std::vector<std::pair<std::string, unsigned>> names = {{"products", skip_products},
                                                                      {"groups", skip_groups},
                                                                      {"ops", skip_ops},
                                                                      {"chain-products", skip_chain_products},
                                                                      {"chain-groups", skip_chain_groups}};
  return names;
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
  for (NodeId id : plan_->order) {
    const Node& n = g_.node(id);
    if (op_bound_leaf(n.op)) continue;
    const int group = plan_->group_at(id);
    if (group >= 0 && fusion_.groups[std::size_t(group)].root != id) continue;  // inside its group's step
    Step st{id, group >= 0 ? nullptr : op_rule(n.op).kernel, group, {}, views_[std::size_t(id)], {}, {}};
    st.in_place = plan_->in_place_step[std::size_t(id)] != 0;
    GG_CHECK(st.kernel != nullptr || group >= 0);
    if (group >= 0)
      for (NodeId m : fusion_.groups[std::size_t(group)].stored) st.stored.push_back(views_[std::size_t(m)]);
    steps_.push_back(std::move(st));
  }
}

const std::vector<NodeId>& Executor::reads(const Step& st) const {
  return st.group >= 0 ? fusion_.groups[std::size_t(st.group)].inputs : g_.node(st.id).inputs;
}

// Each value check of a planned node runs after the step that computes it (leaves: first).
void Executor::bind_checks(const std::vector<int>& step_index) {
  const auto& checks = g_.checks();
  for (std::size_t c = 0; c < checks.size(); ++c) {
    const std::size_t id = std::size_t(checks[c].node);
    if (plan_->step_of[id] < 0) continue;  // not in this plan
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
  for (NodeId id : plan_->order)
    if (g_.node(id).op == OpKind::input && g_.node(id).name == name) return true;
  return false;
}

void Executor::feed(const std::string& name, const void* data, std::int64_t count, DType dtype, const Shape* shape) {
  for (NodeId id : plan_->order) {
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
  const NodeId id = plan_->planned_id(user_id);
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
