// gradcheck(): one executor for the analytic gradients, one for the forward value;
// each checked element is nudged by +-h and restored.
#include "autodiff/gradcheck.h"

#include <fmt/format.h>

#include <cmath>

#include "autodiff/grad.h"

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

}  // namespace gg
