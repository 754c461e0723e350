// The simplification pass: a graph-to-graph function that rebuilds the part of a graph
// that some roots need, merging common subexpressions, folding constants and identities
// (x*1, x+0, reshape to the same shape, permutes that cancel...) and dropping every node
// no root needs. Values are unchanged bit for bit but for the sign of a zero (x + 0 gives
// +0 for x = -0). It knows ops by kind; autodiff/ never calls it (the executor does).
#pragma once

#include <cstdint>
#include <vector>

#include "../ir/graph.h"

namespace gg {

struct SimplifyStats {
  std::int64_t before = 0;      // nodes the roots needed before the pass
  std::int64_t after = 0;       // nodes of the simplified graph
  std::int64_t merged = 0;      // common subexpressions merged into an earlier equal node
  std::int64_t folded = 0;      // nodes of constant inputs replaced by their value
  std::int64_t identities = 0;  // identities removed (x*1, x+0, reshape/permute/expand to the same shape, ...)
};

struct Simplified {
  Graph graph;                // the needed nodes, simplified, in the original order
  std::vector<NodeId> map;    // per node id of the input graph: its id in `graph`, -1 when no root needs it
  std::vector<NodeId> roots;  // the roots' ids in `graph` (map applied)
  SimplifyStats stats;
};

struct SimplifyOptions {
  // Keep op::stop_gradient's marked identity reshapes (a graph that may be differentiated
  // again needs them). An executor's plan only computes values: it drops them like any
  // identity, so that nothing stands between a softmax's row max and its readers.
  bool keep_stop_gradient = true;
};

// Rebuilds the nodes that `roots` need (all nodes when roots is empty). Never merges two
// `random` nodes, nor parameters or inputs of different names. A merged node keeps the
// first node's name and source lines; value checks (Graph::add_check) follow their node.
// Requires: every root is a node of g (throws GraphError otherwise).
Simplified simplify(const Graph& g, const std::vector<NodeId>& roots, const SimplifyOptions& options = {});

}  // namespace gg
