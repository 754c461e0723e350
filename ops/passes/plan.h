// The planner as a pipeline of passes: a Plan is a value, each pass takes one and returns
// the next, reading only its own switch in ExecutorOptions and leaving the plan as it was
// when the switch is off. No pass changes a value the plan computes. In order:
//
//   plan_start      the needed subgraph, simplified and rematerialized (ops/passes/simplify.h,
//                   ops/passes/remat.h), in topological order
//   plan_fusion     element-wise groups run as one step each (ops/passes/fuse.h)
//   plan_slices     chains of batch-parallel steps run one batch slice at a time
//   plan_locals     the chains' values that only one slice's pass reads: per-thread scratch
//   plan_in_place   permutes the chains' products read or write in place
//   plan_masked     the chains' products and groups that skip a constant mask's zeros
//                   (ops/passes/masked.h)
//   plan_epilogues  groups run as a matrix product's epilogue
//   plan_memory     liveness and the arena's offsets
//
// make_plan runs them all; the executor (ops/runtime/executor.h) binds the result to memory
// and runs it. Internal to ops/: not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/ir/graph.h"
#include "ops/passes/fuse.h"
#include "ops/passes/masked.h"
#include "ops/passes/simplify.h"
#include "ops/runtime/config.h"

namespace gg {

// A permute that a chain's products read in place (`to`: its input X; per axis of the
// permute, that axis's stride in X), or a chain's product whose result is written into
// the permute that reads it (`to`: that permute, `writes`; per axis of the product, its
// stride in the permute's output). `to` is -1 for every other node.
struct InPlace {
  NodeId to = -1;
  bool writes = false;
  std::vector<std::int64_t> axis_stride;
};

// A run of consecutive step nodes that all work batch slice by batch slice over the same
// leading dims `lead` (prod(lead) = slices), run slice-major.
struct ChainSpan {
  std::size_t first = 0, last = 0;  // positions in Plan::order of the first and last step nodes
  Shape lead;
  std::int64_t slices = 0;
  std::size_t scratch_bytes = 0;  // a thread's scratch for one slice's local values
};

struct Plan {
  const Graph* given = nullptr;  // the graph given
  bool rewritten = false;        // whether the planned graph is simplified.graph (else *given)
  Simplified simplified;         // the rewritten graph and the id map (the map only when not rewritten)
  std::vector<NodeId> outputs;   // ids in g()
  std::vector<NodeId> order;     // the planned nodes in run order, ids in g()
  std::vector<NodeId> user_order;  // per position in order: the first node of *given it computes, or -1
  std::vector<int> step_of;      // per node of g(): its position in order, or -1
  Fusion fusion;                 // plan_fusion (empty when off)
  std::vector<ChainSpan> chains;  // plan_slices
  // plan_locals: per node of g(), its byte offset in its chain's per-thread scratch when
  // only the chain's pass over one slice reads it (no arena place), else -1.
  std::vector<std::int64_t> local_off;
  // plan_in_place: per node of g(); and per node, whether it is a permute the chains do without.
  std::vector<InPlace> in_place;
  std::vector<char> in_place_step;
  MaskedPlan masked;  // plan_masked (empty when off or there are no chains)
  // plan_epilogues: per node of g(), for a matrix product the root of the group run as its
  // epilogue, else -1.
  std::vector<NodeId> epilogue_for;
  // plan_memory: per node of g(), its byte offset in the arena and the node whose buffer it
  // lives in (a view's: its input's); the arena's size and what it would be without reuse.
  std::vector<std::size_t> offset;
  std::vector<NodeId> root;
  std::size_t arena_bytes = 0, unshared_bytes = 0;

  // The planned graph.
  const Graph& g() const { return rewritten ? simplified.graph : *given; }
  // The fused group node id belongs to, or -1.
  int group_at(NodeId id) const { return fusion.group_of.empty() ? -1 : fusion.group_of[std::size_t(id)]; }
  // A member of a fused group read only inside it (never stored).
  bool never_stored(NodeId id) const;
  // Whether the node has no arena place of its own: a group's inner member, a chain's local
  // value, or a value read or written in place.
  bool off_arena(NodeId id) const;
  // The outputs and the checked nodes: values read after their step (by the caller or a
  // check), so every one of them is computed and stored in full.
  std::vector<NodeId> read_after_steps() const;
  // The id in g() of a node of the graph given, or -1.
  NodeId planned_id(NodeId given_id) const;
  // step_of from order.
  void number_order();
};

// The first plan: checks the outputs (GraphError for an id not in g), keeps what they need,
// simplifies and rematerializes it (options.simplify, options.remat), and orders it.
Plan plan_start(const Graph& g, const std::vector<NodeId>& outputs, const ExecutorOptions& options);

Plan plan_fusion(Plan p, const ExecutorOptions& options);
Plan plan_slices(Plan p, const ExecutorOptions& options);
Plan plan_locals(Plan p, const ExecutorOptions& options);
Plan plan_in_place(Plan p, const ExecutorOptions& options);
Plan plan_masked(Plan p, const ExecutorOptions& options);
Plan plan_epilogues(Plan p, const ExecutorOptions& options);
// Throws GraphError when the arena would be larger than the machine's memory.
Plan plan_memory(Plan p, const ExecutorOptions& options);

// The passes after plan_start, by name, in the order make_plan runs them.
struct PlanPass {
  std::string_view name;
  Plan (*run)(Plan, const ExecutorOptions&);
};
const std::vector<PlanPass>& plan_passes();

// plan_start, then every pass of plan_passes() in order.
Plan make_plan(const Graph& g, const std::vector<NodeId>& outputs, const ExecutorOptions& options);

}  // namespace gg
