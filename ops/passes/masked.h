// Masked products: the matrix products of a plan that may leave out what a constant mask
// makes irrelevant. Causal attention is the case in point: the scores q k^T are needed only
// where the mask keeps them (where(mask, s, -inf) replaces the rest), and the weights are
// exactly 0 where it does not, so weights @ v, and in the backward pass dP = dO v^T,
// P^T dO, dS k and dS^T q, need about half of their products. Found by an analysis of the
// planned graph, not by naming attention: any product that meets the rules below is run
// in row blocks that skip the masked part.
//
// The mask M is a constant of shape (1, ..., 1, R, C) (the same for every batch slice) with
// a nonzero in every row; ext[r] is one past the last nonzero of row r. Over the nodes of
// the plan, the analysis tracks which values are exactly 0, or exactly -inf, wherever M is
// 0: where(M, x, 0) and where(M, x, -inf) make them, and sub by a row vector, add, mul,
// div, neg and exp carry them on. A product may
//   - skip_out: compute only its entries where M is nonzero (row r: its first ext[r]
//     columns; 0 after them), when every later reader of it, followed through same-shape
//     element-wise ops, meets where(M, ., c) or a multiplication by a value that is 0 where
//     M is 0 before anything else reads it (no reduction, product, output or value check);
//   - skip_k: sum only the terms where op(A) can be nonzero, when A is exactly 0 where M is
//     0: op(A) = A: row r sums terms [0, ext[r]); op(A) = A^T: row c sums terms
//     [first[c], R), first[c] the first row r with ext[r] > c.
// The fused groups between them (softmax, its gradient) likewise compute a row only up to
// ext[r] when what they store there and what their row sums and maxima read there is
// known, 0 or -inf (MaskedPlan::rows).
// What changes: nothing where the full computation is finite. A term left out is
// 0 * x, which adds nothing when x is finite (the sign of an exact 0 sum aside); when a
// masked-out x is Inf or NaN, the full product is NaN there and the masked one is not
// (as with the skipping attention kernels of other libraries). Each row block's products
// are summed in the same order as the full product's, so the bits are otherwise the same.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fuse.h"
#include "../ir/graph.h"
#include "../ir/op_rule.h"

namespace gg {

struct MaskedProduct {
  enum Kind : std::uint8_t { none, skip_out, skip_k } kind = none;
  NodeId mask = -1;  // the constant whose zeros are skipped
};

// What the analysis of one plan finds (one pass over it: find_masked). `order`: the
// planned nodes in topological order; `kept`: nodes read after the run (outputs) or by a
// value check, whose every value must be computed.
struct MaskedPlan {
  // Per node id of g: how that matmul may skip (kind none for every other node).
  std::vector<MaskedProduct> products;
  // Per fused group of `fusion` (by index): row limits (ops/passes/fuse.h) for a compiled row
  // group whose rows are the mask's rows (its row length C, its last lead dim R) when every
  // row sum inside reads values that are exactly 0 where M is 0, every row maximum values
  // that are -inf there, and every value it stores is one or the other there: each row then
  // computes only its values up to ext[r] (rounded up to whole registers), the softmax of
  // causal attention about half of them. Null for the other groups.
  std::vector<std::shared_ptr<const RowLimits>> rows;
};
MaskedPlan find_masked(const Graph& g, std::span<const NodeId> order, std::span<const NodeId> kept,
                       const Fusion& fusion);

// A product's row blocks: rows [b * rows, (b + 1) * rows) of the (2-D) output use
// limit[b]: skip_out: its columns [0, limit[b]); skip_k with A: terms [0, limit[b]); with
// A^T: terms [limit[b], K).
struct MaskedBlocks {
  MaskedProduct::Kind kind = MaskedProduct::none;
  std::int64_t rows = 0;
  std::vector<std::int64_t> limit;
  double fraction = 1;  // of the full product's multiply-adds that the blocks do
};

// The row blocks of matmul n (a kind from find_masked) with mask node m.
MaskedBlocks masked_blocks(const Graph& g, const Node& n, MaskedProduct p);

// Row strides of a slice's operands and result, in elements; 0: rows follow each other,
// as the view's shape says. A batch-slice chain reads a permuted operand, and writes a
// result that is only permuted, in place (a head's rows of a (B, T, H, hd) tensor are
// H * hd apart).
struct SliceStrides {
  std::int64_t a = 0, b = 0, c = 0;
};

// Runs matmul n on one 2-D slice (in[0], in[1] and out with every dim but the last two 1):
// with blocks, block by block, and out gets the full product's values (0 at skip_out's
// skipped entries); without, the full product, as the matmul kernel computes it.
void slice_matmul(const Node& n, const MaskedBlocks* blocks, std::span<const View> in, const View& out,
                  SliceStrides ld = {});

}  // namespace gg
