// Plans per batch shape, built on first use and cached; the training plan computes the
// loss, the named outputs and every parameter's gradient, the evaluation plan no gradient.
#include "train/model.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "autodiff/grad.h"
#include "io/message.h"

namespace gg::train {

struct Model::Plan {
  std::unique_ptr<Graph> g;
  ModelOutputs outs;
  std::vector<NodeId> grads;       // per table_ entry (training plans)
  std::vector<std::string> names;  // parameter names in declaration order
  std::unique_ptr<Executor> ex;
  bool training = false;
};

namespace {
// "tokens:i32(8, 64);targets:i32(8, 64)" plus the pass.
std::string plan_key(const Batch& b, bool training) {
  std::string k = training ? "train|" : "eval|";
  for (auto& [name, t] : b) k += fmt::format("{}:{}{};", name, to_string(t.dtype()), to_string(t.shape()));
  return k;
}
std::map<std::string, Shape> shapes_of(const Batch& b) {
  std::map<std::string, Shape> s;
  for (auto& [name, t] : b) s.emplace(name, t.shape());
  return s;
}
std::vector<ParamInfo> table_of(const Graph& g) {
  std::vector<ParamInfo> t;
  for (const Node& n : g.nodes())
    if (n.op == OpKind::param) t.push_back({n.name, n.shape});
  return t;
}
}  // namespace

dsl::Expr ModelInputs::operator[](const std::string& name) {
  if (auto it = declared_.find(name); it != declared_.end()) return it->second;
  auto it = batch_.find(name);
  if (it == batch_.end()) {
    std::vector<std::string> have;
    for (auto& [n, t] : batch_) have.push_back(n);
    throw InputError(fmt::format("the model reads input {} but the batch has no such tensor (it has: {})",
                                 io::in_quotes(name, 40), have.empty() ? "nothing" : io::count_list(have, 4, 40)));
  }
  dsl::Expr e = dsl::input(g_, name, it->second.shape(), it->second.dtype());
  declared_.emplace(name, e);
  return e;
}

const Shape& ModelInputs::shape(const std::string& name) const {
  auto it = batch_.find(name);
  if (it == batch_.end()) throw InputError(fmt::format("the batch has no tensor {}", io::in_quotes(name, 40)));
  return it->second.shape();
}

Model::Model(std::string kind, BuildFn build, std::string options_json)
    : kind_(std::move(kind)), options_json_(std::move(options_json)), build_(std::move(build)) {
  if (!build_) throw InputError(fmt::format("model '{}': no build function", kind_));
}
Model::Model(Model&&) noexcept = default;
Model::~Model() = default;

std::unique_ptr<Graph> Model::build_graph(const Batch& b, bool training, ModelOutputs* outs) const {
  if (b.empty()) throw InputError(fmt::format("model '{}': the batch has no tensors", kind_));
  auto g = std::make_unique<Graph>();
  Bf16Products precision(*g, bf16_);  // the gradient's products follow the forward's (matmul's rule)
  std::optional<FusedAttention> fused;
  if (fused_attention_) fused.emplace(*g, *fused_attention_);
  ModelInputs in(*g, b, training);
  ModelOutputs o = build_(in);
  if (training && !o.loss.g)
    throw InputError(fmt::format("model '{}': the build function gave no loss to train (ModelOutputs::loss is empty)",
                                 kind_));
  for (auto& [name, t] : b)
    if (!in.has(name) || g->find(name, OpKind::input) < 0)
      throw InputError(o.loss.g ? fmt::format("model '{}': the batch's tensor {} is not read by the model", kind_,
                                              io::in_quotes(name, 40))
                                : fmt::format("model '{}': the build function gave no loss (ModelOutputs::loss is "
                                              "empty) and leaves the batch's tensor {} unused", kind_,
                                              io::in_quotes(name, 40)));
  auto own = [&](const dsl::Expr& e, const std::string& what) {
    if (e.g != g.get())
      throw InputError(fmt::format("model '{}': {} was not built in the graph given to the build function", kind_, what));
  };
  if (o.loss.g) {
    own(o.loss, "the loss");
    if (!o.loss.shape().empty() || o.loss.dtype() != DType::f32)
      throw InputError(fmt::format("model '{}': the loss must be an f32 scalar, got {}{}", kind_,
                                   to_string(o.loss.dtype()), to_string(o.loss.shape())));
  }
  std::set<std::string> seen{"loss"};
  for (auto& [name, e] : o.outputs) {
    own(e, fmt::format("output '{}'", name));
    if (!seen.insert(name).second) throw InputError(fmt::format("model '{}': output name '{}' is used twice", kind_, name));
  }
  if (outs) *outs = o;
  return g;
}

std::unique_ptr<Graph> Model::graph_for(const Batch& b, bool training, ModelOutputs* outs,
                                        std::vector<NodeId>* grads) const {
  ModelOutputs o;
  std::unique_ptr<Graph> g = build_graph(b, training, &o);
  if (training) {
    std::vector<NodeId> wrt;  // the parameter nodes, in the graph's order (one node per name)
    for (NodeId id = 0; id < NodeId(g->size()); ++id)
      if (const Node& n = g->node(id); n.op == OpKind::param && !frozen_.count(n.name)) wrt.push_back(id);
    std::vector<NodeId> d = grad(*g, o.loss.id, wrt);
    if (grads) *grads = std::move(d);
  }
  if (outs) *outs = std::move(o);
  return g;
}

const std::vector<ParamInfo>& Model::declare(const Batch& example) {
  if (!declared_) {
    std::unique_ptr<Graph> g = build_graph(example, false, nullptr);
    table_ = table_of(*g);
    declared_ = true;
    decl_graph_ = std::move(g);
    decl_batch_ = shapes_of(example);
  }
  return table_;
}

const std::vector<ParamInfo>& Model::param_table() const {
  if (!declared_) throw InputError(fmt::format("model '{}': declare it with a batch before asking for its parameters", kind_));
  return table_;
}

void Model::init_params(std::uint64_t seed) {
  if (!decl_graph_) throw InputError(fmt::format("model '{}': declare it with a batch before initializing it", kind_));
  params_->init_missing(*decl_graph_, seed);
}

Model::Plan& Model::plan(const Batch& b, bool training) {
  const std::string key = plan_key(b, training) + options_key_ + (training ? frozen_key_ : "") + (bf16_ ? "|bf16" : "") +
                          (fused_attention_ ? (*fused_attention_ ? "|fused-attention" : "|composite-attention") : "");
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto p = std::make_unique<Plan>();
  p->training = training;
  p->g = graph_for(b, training, &p->outs, &p->grads);
  std::vector<ParamInfo> table = table_of(*p->g);
  if (!declared_) {
    table_ = table;
    declared_ = true;
    decl_graph_ = std::make_unique<Graph>(*p->g);
    decl_batch_ = shapes_of(b);
  } else if (table.size() != table_.size() ||
             !std::equal(table.begin(), table.end(), table_.begin(),
                         [](const ParamInfo& a, const ParamInfo& c) { return a.name == c.name && a.shape == c.shape; })) {
    throw InputError(other_params(b, table));
  }
  std::vector<NodeId> outs;
  if (p->outs.loss.g) outs.push_back(p->outs.loss.id);
  for (auto& [name, e] : p->outs.outputs) outs.push_back(e.id);
  if (training) {
    for (const ParamInfo& pi : table_)
      if (!frozen_.count(pi.name)) p->names.push_back(pi.name);
    outs.insert(outs.end(), p->grads.begin(), p->grads.end());
  }
  p->ex = std::make_unique<Executor>(*p->g, outs, *params_, 0, plan_options_);
  if (detect_anomaly_) p->ex->set_detect_anomaly(true);
  return *plans_.emplace(key, std::move(p)).first->second;
}

// The batch `b` declares `table` instead of table_: which inputs changed their shape since
// the first batch, and the first parameter that changes with them.
std::string Model::other_params(const Batch& b, const std::vector<ParamInfo>& table) const {
  auto cut = [](const std::string& s) { return s.size() > 40 ? s.substr(0, 40) + "..." : s; };
  std::string inputs;
  for (auto& [name, t] : b)
    if (auto it = decl_batch_.find(name); it != decl_batch_.end() && it->second != t.shape() && inputs.size() < 120)
      inputs += fmt::format("{}input '{}' is {} here but {} in the first batch", inputs.empty() ? "" : ", ", cut(name),
                            to_string(t.shape()), to_string(it->second));
  const std::string param = [&]() -> std::string {
    for (const ParamInfo& now : table)
      for (const ParamInfo& first : table_)
        if (now.name == first.name && now.shape != first.shape)
          return fmt::format("parameter '{}' would be {} instead of {}", cut(now.name), to_string(now.shape),
                             to_string(first.shape));
    return "the parameters differ in number";
  }();
  return fmt::format("model '{}': {}: {}; parameters are declared once, by the first batch",
                     cut(kind_), inputs.empty() ? "the batch's shapes differ from the first batch's" : inputs, param);
}

double Model::run(Plan& p, const Batch& b) {
  for (auto& [name, t] : b)
    if (p.ex->has_input(name)) p.ex->set_input(name, t);
  p.ex->rng() = rng_;
  p.ex->run();
  rng_ = p.ex->rng();
  return p.outs.loss.g ? double(p.ex->scalar(p.outs.loss.id)) : NAN;
}

double Model::forward_backward(const Batch& b) {
  Plan& p = plan(b, true);
  last_train_ = &p;
  return run(p, b);
}

double Model::forward_backward(const Batch& b, const std::function<void(std::size_t, std::span<const float>)>& on_grad) {
  Plan& p = plan(b, true);
  last_train_ = &p;
  p.ex->watch(p.grads, [&p, &on_grad](std::size_t i) { on_grad(i, p.ex->value(p.grads[i]).fspan()); });
  struct Unwatch {  // the plan is cached: the callback must not outlive this call
    Executor& ex;
    ~Unwatch() { ex.watch({}, nullptr); }
  } unwatch{*p.ex};
  return run(p, b);
}

std::vector<std::size_t> Model::grad_ready_at(const Batch& b, std::vector<std::string>* names) {
  Plan& p = plan(b, true);
  if (names) *names = p.names;
  return p.ex->ready_at(p.grads);
}

std::vector<ParamGrad> Model::grads() {
  if (!last_train_) throw InputError(fmt::format("model '{}': grads() before any forward_backward()", kind_));
  std::vector<ParamGrad> r;
  for (std::size_t i = 0; i < last_train_->names.size(); ++i) {
    const std::string& name = last_train_->names[i];
    r.push_back({name, &params_->at(name), last_train_->ex->value(last_train_->grads[i]).fspan()});
  }
  return r;
}

double Model::loss(const Batch& b) { return run(plan(b, false), b); }

std::map<std::string, Tensor> Model::evaluate(const Batch& b) {
  Plan& p = plan(b, false);
  std::map<std::string, Tensor> r;
  run(p, b);
  if (p.outs.loss.g) r.emplace("loss", p.ex->get(p.outs.loss.id));
  for (auto& [name, e] : p.outs.outputs) r.emplace(name, p.ex->get(e.id));
  return r;
}

View Model::train_output(const std::string& name) const {
  if (!last_train_) throw InputError(fmt::format("model '{}': no forward_backward() has run yet", kind_));
  if (name == "loss" && last_train_->outs.loss.g) return last_train_->ex->value(last_train_->outs.loss.id);
  for (auto& [n, e] : last_train_->outs.outputs)
    if (n == name) return last_train_->ex->value(e.id);
  throw InputError(fmt::format("model '{}': no output named '{}'", kind_, name));
}

Executor& Model::plan_for(const Batch& b, bool training) { return *plan(b, training).ex; }

void Model::share_params(Model& other) {
  if (!plans_.empty())
    throw InputError(fmt::format("model '{}': share_params after a plan was built; share before the first pass", kind_));
  params_ = other.params_;
}

void Model::set_frozen(const std::vector<std::string>& names) {
  frozen_ = std::set<std::string>(names.begin(), names.end());
  frozen_key_ = fmt::format("|frozen:{}", fmt::join(frozen_, ","));
}

void Model::set_plan_options(const ExecutorOptions& o) {
  plan_options_ = o;
  options_key_ = "|off:" + switches_off(o);
}

void Model::set_bf16_products(bool on) { bf16_ = on; }

void Model::set_fused_attention(std::optional<bool> on) { fused_attention_ = on; }

void Model::set_detect_anomaly(bool on) {
  detect_anomaly_ = on;
  for (auto& [key, p] : plans_) p->ex->set_detect_anomaly(on);
}

std::vector<ZeroGrad> Model::structurally_zero(const Batch& b) {
  Plan& p = plan(b, true);
  if (p.names.empty()) return {};
  std::vector<NodeId> params;
  for (const std::string& name : p.names) params.push_back(p.g->find(name, OpKind::param));
  return structurally_zero_grads(*p.g, p.outs.loss.id, params);
}

Executor& Model::last_train_plan() {
  if (!last_train_) throw InputError(fmt::format("model '{}': no forward_backward() has run yet", kind_));
  return *last_train_->ex;
}

void load_params(ParamStore& store, const std::map<std::string, Tensor>& tensors, const std::vector<ParamInfo>& table,
                 const std::string& source, bool allow_extra) {
  std::vector<std::string> missing, misshaped, unexpected;
  std::set<std::string> known;
  for (const ParamInfo& p : table) {
    known.insert(p.name);
    auto it = tensors.find(p.name);
    if (it == tensors.end()) missing.push_back(io::cut(p.name, 40));
    else if (it->second.dtype() != DType::f32 || it->second.shape() != p.shape)
      misshaped.push_back(fmt::format("{} is {}{} but the model needs f32{}", io::cut(p.name, 40),
                                      to_string(it->second.dtype()), io::cut(to_string(it->second.shape()), 40),
                                      io::cut(to_string(p.shape), 40)));
  }
  if (!allow_extra)
    for (auto& [name, t] : tensors)
      if (!known.count(name)) unexpected.push_back(io::cut(name, 40));  // cut, control bytes escaped: one line
  if (missing.empty() && misshaped.empty() && unexpected.empty()) {
    for (const ParamInfo& p : table) store.set(p.name, tensors.at(p.name));
    return;
  }
  // The first few names of each kind of problem; fewer when that would make a long line, then
  // only the first kind's first name, then only the counts.
  auto message = [&](std::size_t shown, std::size_t shown_after_first) {
    std::string msg = fmt::format("{}: the tensors do not match the model's parameters:", io::cut(source, 80));
    bool first = true;
    auto add = [&](const char* what, const std::vector<std::string>& xs, std::size_t n) {
      if (xs.empty()) return;
      if (!first) n = std::min(n, shown_after_first);
      first = false;
      msg += fmt::format(" {} [{}];", what,
                         n > 0 ? io::count_list(xs, n, 200)
                               : fmt::format("{} tensor{}", io::with_commas(xs.size()), xs.size() > 1 ? "s" : ""));
    };
    add("missing", missing, shown);
    add("unexpected", unexpected, shown);
    add("mis-shaped", misshaped, std::min<std::size_t>(shown, 1));
    msg.pop_back();
    return msg;
  };
  std::string msg = message(3, 3);
  if (msg.size() > 270) msg = message(1, 1);
  if (msg.size() > 270) msg = message(1, 0);
  if (msg.size() > 270) msg = message(0, 0);
  throw InputError(msg);
}

}  // namespace gg::train
