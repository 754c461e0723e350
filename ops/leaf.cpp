// Leaves: input, param, constant and random. They have no inputs; the executor binds
// input, param and constant nodes to storage it owns (so they have no kernel), and
// `random` draws fresh uniform noise from the run's generator.
#include "ops/kernel_util.h"

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

}  // namespace

const OpRule input_rule = {infer_named_leaf, nullptr, nullptr};

const OpRule param_rule = {
    [](const Graph& g, Node& n) {
      infer_named_leaf(g, n);
      if (n.dtype != DType::f32) g.fail(n, "parameters are f32");
      NodeId prev = g.find(n.name, OpKind::param);
      if (prev >= 0 && g.node(prev).shape != n.shape)
        g.fail(n, fmt::format("parameter declared again with shape {}, first as {} at {}", to_string(n.shape),
                              to_string(g.node(prev).shape), site_string(g.node(prev).loc)));
    },
    nullptr, nullptr};

const OpRule constant_rule = {
    [](const Graph& g, Node& n) {
      infer_leaf(g, n);
      if (!n.attrs.data || std::int64_t(n.attrs.data->size()) != numel(n.shape))
        g.fail(n, fmt::format("has {} values for shape {}", n.attrs.data ? n.attrs.data->size() : 0,
                              to_string(n.shape)));
    },
    nullptr, nullptr};

const OpRule random_rule = {
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
    nullptr};

}  // namespace gg
