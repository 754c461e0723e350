// Higher order as a helper: Hessian-vector products built as graph, by differentiating
// the gradient (Pearlmutter's trick in reverse-over-reverse form), so they can be listed,
// run and checked like any other gradient.
#pragma once

#include <source_location>
#include <vector>

#include "../ops/ir/graph.h"

namespace gg {

// (H v)_i = d/d(params[i]) sum_j <d loss / d params[j], v[j]>, one node per parameter with
// its shape, named "hvp(<param name>)". v[j] is any f32 node of params[j]'s shape (an
// input fed at run time, a constant). loss must be a scalar. Throws GraphError at `loc`
// when v and params differ in count or a v[j] in shape or dtype.
std::vector<NodeId> hvp(Graph& g, NodeId loss, const std::vector<NodeId>& params, const std::vector<NodeId>& v,
                        std::source_location loc = std::source_location::current());

}  // namespace gg
