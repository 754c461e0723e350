// hvp(): grad, a dot product with v, grad again.
#include "autodiff/hvp.h"

#include <fmt/format.h>

#include "autodiff/grad.h"
#include "ops/ir/build.h"

namespace gg {

std::vector<NodeId> hvp(Graph& g, NodeId loss, const std::vector<NodeId>& params, const std::vector<NodeId>& v,
                        std::source_location loc) {
  const std::string at = site_string(g.user_loc().value_or(loc));
  auto fail = [&](const std::string& msg) { throw GraphError(fmt::format("hvp at {}: {}", at, msg)); };
  if (v.size() != params.size()) fail(fmt::format("{} parameters but {} vectors", params.size(), v.size()));
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (v[j] < 0 || v[j] >= g.size() || params[j] < 0 || params[j] >= g.size())
      fail(fmt::format("pair {} (%{}, %{}) is not two nodes of this graph (it has {} nodes)", j, params[j], v[j], g.size()));
    const Node& p = g.node(params[j]);
    const Node& x = g.node(v[j]);
    if (x.shape != p.shape || x.dtype != DType::f32)
      fail(fmt::format("v[{}] is {}{} but parameter '{}' is f32{}", j, to_string(x.dtype), to_string(x.shape), p.name,
                       to_string(p.shape)));
  }
  UserSite site(g, loc);
  std::vector<NodeId> gs = grad(g, loss, params, -1, loc);  // gs[j]: like params[j]
  NodeId dot = -1;
  {
    NameScope scope(g, "hvp.dot", true);
    for (std::size_t j = 0; j < gs.size(); ++j) {
      NodeId d = op::sum(g, op::reshape(g, op::mul(g, gs[j], v[j]), {-1}), 0);  // d: ()
      dot = dot < 0 ? d : op::add(g, dot, d);
    }
    if (dot < 0) dot = op::scalar(g, 0.f);
  }
  std::vector<NodeId> hv = grad(g, dot, params, -1, loc);
  for (std::size_t j = 0; j < hv.size(); ++j) {
    if (g.node(hv[j]).name.rfind("grad(", 0) == 0 || g.node(hv[j]).name.empty())
      g.set_name(hv[j], fmt::format("hvp({})", g.node(params[j]).name));
  }
  return hv;
}

}  // namespace gg
