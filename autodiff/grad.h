// Reverse-mode differentiation as a graph transformation: grad() appends the gradient
// as more nodes built from the same primitives, so it can be printed, run, checked and
// differentiated again. Knows no op by name: each op's gradient rule comes from the op
// table, and broadcasting is undone here, once, with op::sum_to.
#pragma once

#include <source_location>
#include <vector>

#include "../ops/ir/build.h"
#include "../ops/ir/graph.h"

namespace gg {

// Appends d(out)/d(wrt[i]) for each i and returns their ids, each with wrt[i]'s shape and
// named "grad(<wrt name>)". `out` must be a scalar unless a `seed` (d(loss)/d(out), of
// out's shape) is given. A wrt that `out` does not depend on gets zeros. Mistakes (a
// non-scalar out without a seed, an id that is not a node of g) throw GraphError at `loc`,
// the caller's grad() line.
std::vector<NodeId> grad(Graph& g, NodeId out, const std::vector<NodeId>& wrt, NodeId seed = -1,
                         std::source_location loc = std::source_location::current());

}  // namespace gg
