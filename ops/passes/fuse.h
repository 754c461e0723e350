// The fusion pass: a planning pass over an ordered graph that groups element-wise chains,
// row reductions and broadcasts into one step each, run so that the chain's intermediate
// values never go to memory (and take no room in the arena). It is not a graph rewrite:
// the graph and its ids are unchanged; the executor runs a group as one step.
//
// A group works over a row space S = (lead..., n). Its members are f32 nodes of shape S
// ("full") or (lead..., 1) ("reduced": one value per row): the element-wise ops (the
// records of class elementwise or selection, ops/ir/op_rule.h), expand of a value onto a
// member's shape, and sum / max over the last axis with keepdim (S ->
// (lead..., 1)). Its inputs, read from memory, are f32 values of any shape that
// broadcasts onto S: layer-norm weights (n), row statistics (lead..., 1), masks (1, 1, T,
// T), one-element scalars. A group is a DAG whose root (its last member) is stored; any
// other member is not kept (an output, or a node with a value check) and is either read
// only by members of the group, or also read by nodes planned after the root, and then
// stored too ("stored" members: a softmax's row max and exponentials, which the backward
// pass reads). Groups are convex: no path leaves a group and re-enters it.
//
// Groups whose program is in ops/passes/fused_programs.inc (GELU, layer norm, attention's masked
// softmax, their gradients, residual sums) run a kernel compiled for that program
// (ops/passes/fuse_compiled.h; GG_COMPILED=0 interprets every group).
//
// Values are those of the ops run one by one, bit for bit. A reduction runs the unfused
// kernel's row function (simd::sum / simd::max_of over a contiguous row); members whose
// record is not transcendental (binary ops, where, compare, neg, sqrt) are exact whatever
// the SIMD/scalar split; transcendental ones (exp, log, tanh, erf, ...) run over blocks of
// whole rows that start on a register boundary of the flat tensor, so their SIMD/scalar
// split is the unary kernel's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../runtime/config.h"
#include "../ir/graph.h"
#include "../ir/op_rule.h"

namespace gg {

// One member of a group's program: op applied to operands; an operand >= 0 is the value
// of an earlier member (its index in the program), < 0 is group input -(operand + 1).
struct FusedInstr {
  OpKind op;
  int a = 0, b = 0, c = 0;  // b unused by unary ops and reductions, c used by where only
  Cmp cmp = Cmp::eq;        // compare's relation
  bool reduced = false;     // the member is (lead..., 1): one value per row
  bool stored = false;      // also read outside the group: written to its own buffer
};

// How a group input is read in the row space: row r's values start at
// sum_d idx_d(r) * lead_stride[d], then step by `inner` (0: one value broadcast over the row).
struct FusedRead {
  std::vector<std::int64_t> lead_stride;  // per lead dim of the row space, 0 on broadcast dims
  std::int64_t inner = 0;                 // 0 or 1
  std::int64_t step = -1;                 // row r starts at r * step (0: the same row for all), -1: no such step
};

struct FusedGroup {
  NodeId root = -1;                // the last member; its value is stored
  std::vector<NodeId> members;     // in execution order, root last
  std::vector<NodeId> stored;      // members but the root that are read outside the group, in order
  std::vector<NodeId> inputs;      // values read from memory, broadcasting onto the row space
  std::vector<FusedInstr> program; // one per member, same order
  // Flat groups (every member one shape, every input that shape or one element, no
  // reduction) run tile by tile over the flat values; the others run row by row.
  bool flat = true;
  Shape lead;                      // row space (lead..., n): rows = prod(lead)
  std::int64_t n = 1;
  std::vector<FusedRead> reads;    // per input, for row groups
  int compiled = -1;               // its kernel compiled ahead of time (ops/passes/fuse_compiled.h), -1: interpreted
};

struct Fusion {
  std::vector<FusedGroup> groups;  // groups of two or more members, in order of their roots
  std::vector<int> group_of;       // per node id: the group it belongs to, or -1
};

// At most this many members per group (each holds a buffer while the group runs).
inline constexpr int max_fused_members = 24;
// Rows longer than this are not fused row-wise (flat groups have no limit).
inline constexpr std::int64_t max_fused_row = 8192;

// Groups the nodes of `order` (a topological order of the nodes planned) whose values need
// not be stored: nodes in `kept` are never interior to a group. `compiled`: groups that
// match a program compiled ahead of time run it (ExecutorOptions::compiled; false: every
// group is interpreted).
Fusion fuse_elementwise(const Graph& g, const std::vector<NodeId>& order, const std::vector<NodeId>& kept,
                        bool compiled = env_config().compiled);

// What a row group's rows hold past a point, where a mask makes it known
// (ops/passes/masked.h's MaskedPlan::rows): row r computes only its first len[r % len.size()]
// values (a multiple of simd::width), its row sums and maxima read only those, and its
// stored members and root take fill[j] after them (j: the stored members in group.stored
// order, then the root). The values are the full row's wherever that is finite (but for
// the sign of an exact zero that the fill stands for).
struct RowLimits {
  std::vector<std::int64_t> len;
  std::vector<float> fill;
  double fraction = 1;  // of the row values computed
};

// Runs a group: out = the root's value, stored: the stored members' values (in
// group.stored order); in: the group's inputs, in group.inputs order. Only the part
// [begin, end) of the group's extent (its rows, or its values for a flat group; end -1:
// to the end) when given: the executor runs a batch slice of a group at a time that way
// (begin must be a multiple of simd::width, which keeps every SIMD/scalar split, unless
// the group's rows are whole registers; a matrix product's epilogue runs a row block at a
// time that way). With limits, a compiled row group computes only the rows' known-free
// parts (interpreted ones run whole rows: the same values).
void run_fused(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored = {},
               std::int64_t begin = 0, std::int64_t end = -1, const RowLimits* limits = nullptr);

// The group's extent: its rows (prod(lead)), or its values for a flat group.
std::int64_t fused_extent(const FusedGroup& group, const View& out);

}  // namespace gg
