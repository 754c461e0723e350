// Leaves: input, param, constant and random. They have no inputs; the executor binds
// input, param and constant nodes to storage it owns (so they have no kernel), and
// `random` draws fresh uniform noise from the run's generator.
#include "ops/ir/eval_f64.h"
#include "ops/primitives/kernel_util.h"

namespace gg {
namespace {

void infer_leaf(const Graph& g, Node& n) {
  for (auto d : n.attrs.dims)
    if (d < 0) g.fail(n, fmt::format("negative dimension in shape {}", to_string(n.attrs.dims)));
  n.shape = n.attrs.dims;
  n.dtype = n.attrs.dtype;
}

void infer_named_leaf(const Graph& g, Node& n) {
  if (n.name.empty()) g.fail(n, "needs a name");
  infer_leaf(g, n);
}

// The value of a fed or stored leaf in double: the one given by name.
void leaf_f64(const F64Args& a, const char* what) {
  const Node& n = a.n;
  auto it = a.leaves.find(n.name);
  if (it == a.leaves.end()) a.g.fail(n, fmt::format("eval_f64: no value for {} '{}'", what, n.name));
  if (it->second.shape != n.shape || it->second.dtype != n.dtype || it->second.v.size() != a.out.v.size())
    a.g.fail(n, fmt::format("eval_f64: {} '{}' is {}{} in the graph but {}{} ({} values) was given", what, n.name,
                            to_string(n.dtype), to_string(n.shape), to_string(it->second.dtype),
                            to_string(it->second.shape), it->second.v.size()));
  a.out.v = it->second.v;
}

}  // namespace

const OpRule input_rule = {OpClass::bound_leaf, infer_named_leaf, nullptr, nullptr, nullptr,
                           [](const F64Args& a) { leaf_f64(a, "input"); }};

const OpRule param_rule = {
    OpClass::bound_leaf,
    [](const Graph& g, Node& n) {
      infer_named_leaf(g, n);
      if (n.dtype != DType::f32) g.fail(n, "parameters are f32");
      NodeId prev = g.find(n.name, OpKind::param);
      if (prev >= 0 && g.node(prev).shape != n.shape)
        g.fail(n, fmt::format("parameter declared again with shape {}, first as {} at {}", to_string(n.shape),
                              to_string(g.node(prev).shape), site_string(g.node(prev).loc)));
    },
    nullptr, nullptr, nullptr, [](const F64Args& a) { leaf_f64(a, "parameter"); }, nullptr, nullptr,
    [](const Node& n) {
      static const char* k[] = {"zeros", "ones", "normal", "uniform"};
      return fmt::format("init={}", k[n.attrs.init.kind]);
    }};

const OpRule constant_rule = {
    OpClass::bound_leaf,
    [](const Graph& g, Node& n) {
      infer_leaf(g, n);
      if (!n.attrs.data || std::int64_t(n.attrs.data->size()) != numel(n.shape))
        g.fail(n, fmt::format("has {} values for shape {}", n.attrs.data ? n.attrs.data->size() : 0,
                              to_string(n.shape)));
    },
    nullptr, nullptr, nullptr,
    [](const F64Args& a) {
      for (std::size_t i = 0; i < a.out.v.size(); ++i) a.out.v[i] = double((*a.n.attrs.data)[i]);
    },
    nullptr,
    nullptr,
    [](const Node& n) {  // a scalar's value
      return n.attrs.data && n.attrs.data->size() == 1 ? fmt::format("{}", (*n.attrs.data)[0]) : std::string();
    }};

const OpRule random_rule = {
    OpClass::noise,
    [](const Graph& g, Node& n) {
      infer_leaf(g, n);
      n.dtype = DType::f32;
    },
    [](const KernelArgs& a) {
      // Serial on purpose: the stream of numbers must not depend on the thread count.
      std::uniform_real_distribution<float> u(0.f, 1.f);
      float* o = a.out.f();
      for (std::int64_t i = 0, n = a.out.numel(); i < n; ++i) o[i] = u(*a.rng);
    },
    nullptr, nullptr,
    [](const F64Args& a) {
      a.g.fail(a.n, "eval_f64 refuses random nodes: their noise is drawn by the executor's generator, so an f64 "
                    "run could not reproduce it (build the graph with dropout off)");
    }};

}  // namespace gg
