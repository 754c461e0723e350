// The element-wise fusion pass: a planning pass over an ordered graph that groups chains of
// element-wise ops (add, sub, mul, div, maximum, neg, exp, log, sqrt, tanh, erf) into one
// step each, run over cache-sized tiles so the chain's intermediate values never go to
// memory (and take no room in the arena). A group is a tree of f32 nodes of one shape whose
// operands are values of that shape or one-element values; each member but the root has
// exactly one reader (in the group) and is not kept (an output, or a node with a value
// check). Values are those of the ops run one by one, bit for bit: each member runs the
// op's own element function (elementwise_fn.h) on the same SIMD/scalar split. It is not a
// graph rewrite: the graph and its ids are unchanged; the executor runs a group as a step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "graph.h"
#include "op_rule.h"

namespace gg {

// One member of a group's program: op applied to operands; an operand >= 0 is the value
// of an earlier member (its index in the program), < 0 is group input -(operand + 1).
struct FusedInstr {
  OpKind op;
  int a = 0, b = 0;  // b unused by unary ops
};

struct FusedGroup {
  NodeId root = -1;                // the node whose value the group stores
  std::vector<NodeId> members;     // in execution order, root last
  std::vector<NodeId> inputs;      // values read from memory: the root's shape, or one element
  std::vector<FusedInstr> program; // one per member, same order
};

struct Fusion {
  std::vector<FusedGroup> groups;  // groups of two or more members, in order of their roots
  std::vector<int> group_of;       // per node id: the group it belongs to, or -1
};

// At most this many members per group (each holds one tile while the group runs).
inline constexpr int max_fused_members = 16;

// Groups the nodes of `order` (a topological order of the nodes planned) whose values need
// not be stored: nodes in `kept` are never interior to a group.
Fusion fuse_elementwise(const Graph& g, const std::vector<NodeId>& order, const std::vector<NodeId>& kept);

// Runs a group: out = the root's value; in: the group's inputs, in group.inputs order.
void run_fused(const FusedGroup& group, std::span<const View> in, View out);

// The pass's switch for executors: false when the environment has GG_FUSE=0.
bool fuse_by_default();

}  // namespace gg
