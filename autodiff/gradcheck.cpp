// gradcheck(): one executor for the analytic gradients, one for the forward value;
// each checked element is nudged by +-h and restored.
#include "autodiff/gradcheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "autodiff/grad.h"
#include "ops/ir/eval_f64.h"

namespace gg {

GradcheckResult gradcheck(Graph& g, NodeId out, const std::vector<NodeId>& wrt, ParamStore& params,
                          const std::map<std::string, Tensor>& inputs, GradcheckOptions opts) {
  std::vector<NodeId> grads = grad(g, out, wrt);
  std::vector<NodeId> outs = grads;
  outs.push_back(out);
  Executor analytic(g, outs, params, 1);
  Executor forward(g, {out}, params, 1);
  for (auto& [name, t] : inputs) {
    if (analytic.has_input(name)) analytic.set_input(name, t);
    if (forward.has_input(name)) forward.set_input(name, t);
  }
  analytic.run();

  GradcheckResult res;
  for (std::size_t w = 0; w < wrt.size(); ++w) {
    const Node& n = g.node(wrt[w]);
    if ((!n.is_param() && !n.is_input()) || n.dtype != DType::f32)
      g.fail(n, "gradcheck perturbs f32 params and inputs only");
    Tensor ga = analytic.get(grads[w]);
    Tensor x = n.is_param() ? params.at(n.name) : inputs.at(n.name);
    auto eval = [&](const Tensor& xv) {
      if (n.is_param()) params.at(n.name) = xv;
      else forward.set_input(n.name, xv);
      forward.run();
      return double(forward.scalar(out));
    };
    const std::int64_t total = x.numel();
    const std::int64_t count = std::min<std::int64_t>(total, opts.max_elements);
    for (std::int64_t c = 0; c < count; ++c) {
      const std::int64_t i = count == total ? c : c * total / count;
      Tensor xp = x;
      const double x0 = x.f()[i];
      const double h = opts.step * std::max(1.0, std::abs(x0));
      xp.f()[i] = float(x0 + h);
      const double hp = double(xp.f()[i]) - x0;  // the step actually taken in float
      double fp = eval(xp);
      xp.f()[i] = float(x0 - h);
      const double hm = x0 - double(xp.f()[i]);
      double fm = eval(xp);
      const double numeric = (fp - fm) / (hp + hm);
      const double a = ga.f()[i];
      const double err = std::abs(a - numeric);
      ++res.checked;
      if (err > res.worst_abs) {
        res.worst_abs = err;
        res.worst = fmt::format("{}[{}]: analytic {:.6g} vs numeric {:.6g}", n.name, i, a, numeric);
      }
      if (err > opts.atol + opts.rtol * std::max(std::abs(a), std::abs(numeric))) res.ok = false;
    }
    eval(x);  // restore
  }
  return res;
}

std::vector<ParamCheck> gradcheck_params(Graph& g, NodeId loss, const std::vector<NodeId>& params,
                                         const ParamStore& store, const std::map<std::string, Tensor>& inputs,
                                         ParamCheckOptions opts) {
  for (NodeId p : params) {
    if (p < 0 || p >= g.size())
      throw GraphError(fmt::format("gradcheck_params: %{} is not a node of this graph (it has {} nodes)", p, g.size()));
    if (!g.node(p).is_param()) g.fail(g.node(p), "gradcheck_params checks parameters only");
  }
  std::vector<NodeId> grads = grad(g, loss, params);
  ParamStore f32_store = store;  // the executor binds by reference; the caller's store stays untouched
  Executor analytic(g, grads, f32_store, 1);
  for (auto& [name, t] : inputs)
    if (analytic.has_input(name)) analytic.set_input(name, t);
  analytic.run();

  F64Leaves leaves = f64_leaves(store, inputs);
  const std::vector<F64Value> g64 = eval_f64(g, grads, leaves);
  auto loss_at = [&]() { return eval_f64(g, {loss}, leaves)[0].v[0]; };
  std::vector<ParamCheck> out;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Node& n = g.node(params[k]);
    ParamCheck pc{n.name, n.shape};
    Tensor ga = analytic.get(grads[k]);
    std::vector<double>& x = leaves.at(n.name).v;
    const std::int64_t total = ga.numel();
    const std::int64_t count = std::min<std::int64_t>(total, std::max(1, opts.max_elements));
    std::vector<std::int64_t> at;
    for (std::int64_t c = 0; c < count; ++c) at.push_back(count == total ? c : c * total / count);
    std::int64_t largest = 0;
    for (std::int64_t i = 1; i < total; ++i)
      if (std::abs(ga.f()[i]) > std::abs(ga.f()[largest])) largest = i;
    if (count < total && std::find(at.begin(), at.end(), largest) == at.end()) at.push_back(largest);
    const double scale = opts.relative_to_largest ? std::abs(double(ga.f()[largest])) : 0.0;
    for (std::int64_t i : at) {
      const double x0 = x[std::size_t(i)];
      const double h = opts.step * std::max(1.0, std::abs(x0));
      auto f = [&](double dx) {
        x[std::size_t(i)] = x0 + dx;
        return loss_at();
      };
      // Fourth-order central differences: error O(h^4) + O(eps |f| / h), both ~1e-12 here.
      const double num = (8 * (f(h) - f(-h)) - (f(2 * h) - f(-2 * h))) / (12 * h), a = ga.f()[i];
      x[std::size_t(i)] = x0;
      const double rel = std::abs(a - num) / std::max({std::abs(a), std::abs(num), opts.floor, scale});
      const double a64 = g64[k].v[std::size_t(i)];
      pc.worst_rel_f64 =
          std::max(pc.worst_rel_f64, std::abs(a64 - num) / std::max({std::abs(a64), std::abs(num), opts.floor}));
      ++pc.checked;
      if (pc.worst_index < 0 || rel > pc.worst_rel) {
        pc.worst_rel = rel;
        pc.worst_index = i;
        pc.analytic = a;
        pc.numeric = num;
      }
    }
    pc.ok = pc.worst_rel <= opts.rtol && pc.worst_rel_f64 <= opts.rtol;
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace gg
