// The rematerialization pass: a graph-to-graph function that trades a little recomputation
// for memory. A training graph keeps many forward values alive until the backward part
// reads them; when such a value is a cheap element-wise function of values that are alive
// then anyway (or that can themselves be recomputed the same way), the pass gives its late
// readers a copy of the node placed right before the first of them, so the original is
// freed after its early readers and the copy lives only briefly (and, being element-wise,
// usually runs inside its readers' fused group). A copy that reads a single large value
// and is read only by element-wise ops is made before each late reader instead, inside
// its group, and never stored. GELU's intermediate values, the layer
// norm's normalized output and affine output, and softmax's weights (from the stored
// exponentials and row sums) are the values it takes in a transformer.
//
// Values are unchanged bit for bit: a copy runs the same kernel on the same inputs. Only
// element-wise f32 nodes of at least RematOptions::min_elements values are copied,
// never a node that is kept (a root or a checked node), never a matmul, reduction, data
// movement or random draw (a copy reads the same draw), and never a chain deeper than
// RematOptions::max_depth. The pass knows ops by kind,
// like simplify; autodiff/ never calls it (the executor does, after simplify).
#pragma once

#include <cstdint>
#include <vector>

#include "../ir/graph.h"
#include "simplify.h"

namespace gg {

struct RematOptions {
  // Values smaller than this are not worth a copy (64 KiB: the small tensors of a model).
  std::int64_t min_elements = 16384;
  // How many element-wise nodes back a copy may reach to find values that are still alive.
  int max_depth = 4;
  // Readers this many nodes or more after the previous reader (or the node) are "late".
  std::int64_t min_gap = 16;
  // A value last read at most this many nodes before a copy needs it is kept alive until
  // then (GELU's x, last read just before the backward's x / sqrt 2 is recomputed).
  std::int64_t extend = 8;
};

struct RematStats {
  std::int64_t copied = 0;  // nodes given a late copy
  std::int64_t moved = 0;   // of those, nodes whose original had no early reader (dropped)
};

struct Rematerialized {
  Graph graph;                // g with the copies inserted before their first readers
  std::vector<NodeId> map;    // per node id of g: its id in `graph` (-1: dropped, not kept)
  std::vector<NodeId> roots;  // the roots' ids in `graph`
  RematStats stats;
};

// Requires: g in topological id order (as built, or as simplify() returns it), every root
// a node of g.
Rematerialized rematerialize(const Graph& g, const std::vector<NodeId>& roots, const RematOptions& options = {});

}  // namespace gg
