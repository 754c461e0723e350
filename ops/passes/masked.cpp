// Masked products (ops/passes/masked.h): the analysis of which products may skip, and the row-block
// runner.
#include "ops/passes/masked.h"

#include <algorithm>
#include <optional>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "ops/cpu/bf16.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/simd.h"

namespace gg {
namespace {

using i64 = std::int64_t;

// Rows of a block. Measured on one core against the full slice products of the medium
// model's attention (q k^T, P v, P^T dO) with blocks of 16, 32, 64 and 128 rows: 32 was
// the fastest for all three, and every size beat the full products.
constexpr i64 kBlockRows = 32;

// One past the last nonzero of each row of mask node id, or empty when it is not a mask
// this file can use: a constant (or a reshape of one) of f32 (1, ..., 1, R, C) with a
// nonzero in every row.
std::vector<i64> row_extents(const Graph& g, NodeId id) {
  const Shape& s = g.node(id).shape;
  NodeId src = id;
  while (g.node(src).op == OpKind::reshape) src = g.node(src).inputs[0];  // same values, same order
  const Node& m = g.node(src);
  if (m.op != OpKind::constant || m.dtype != DType::f32 || s.size() < 2 || !m.attrs.data) return {};
  for (std::size_t d = 0; d + 2 < s.size(); ++d)
    if (s[d] != 1) return {};
  const i64 R = s[s.size() - 2], C = s.back();
  const std::vector<float>& v = *m.attrs.data;
  if (R < 1 || C < 1 || i64(v.size()) != R * C) return {};
  std::vector<i64> ext(std::size_t(R), 0);
  for (i64 r = 0; r < R; ++r) {
    for (i64 c = C; c > 0; --c)
      if (v[std::size_t(r * C + c - 1)] != 0.f) {
        ext[std::size_t(r)] = c;
        break;
      }
    if (ext[std::size_t(r)] == 0) return {};  // a row with every entry masked: its softmax is NaN
  }
  return ext;
}

bool scalar_constant(const Graph& g, NodeId id, float& value) {
  const Node& n = g.node(id);
  if (n.op != OpKind::constant || n.dtype != DType::f32 || numel(n.shape) != 1 || !n.attrs.data ||
      n.attrs.data->size() != 1)
    return false;
  value = (*n.attrs.data)[0];
  return true;
}

// The last two dims of s are the mask's (R, C).
bool fits(const Shape& s, const Shape& mask) {
  return s.size() >= 2 && s[s.size() - 2] == mask[mask.size() - 2] && s.back() == mask.back();
}

// What is known of a value where the mask is 0.
struct Fact {
  enum Kind : std::uint8_t { unknown, zero, ninf } kind = unknown;
  NodeId mask = -1;
};

class Analysis {
 public:
  Analysis(const Graph& g, std::span<const NodeId> order, std::span<const NodeId> kept)
      : g_(g), facts_(std::size_t(g.size())), readers_(std::size_t(g.size())), kept_(std::size_t(g.size()), 0) {
    for (NodeId id : kept) kept_[std::size_t(id)] = 1;
    for (NodeId id : order)
      for (NodeId in : g.node(id).inputs) readers_[std::size_t(in)].push_back(id);
    for (NodeId id : order) facts_[std::size_t(id)] = infer(id);
  }

  // Row limits for group grp (see MaskedPlan::rows), or null.
  std::shared_ptr<const RowLimits> rows(const FusedGroup& grp) {
    if (grp.flat || grp.compiled < 0 || grp.lead.empty() || grp.members.empty()) return nullptr;
    const Fact root = facts_[std::size_t(grp.root)];
    if (root.kind == Fact::unknown) return nullptr;
    const NodeId m = root.mask;
    const Shape& ms = g_.node(m).shape;
    const i64 R = ms[ms.size() - 2], C = ms.back();
    if (grp.n != C || grp.lead.back() != R) return nullptr;
    auto node_of = [&](int operand) { return operand >= 0 ? grp.members[std::size_t(operand)] : grp.inputs[std::size_t(-operand - 1)]; };
    auto is = [&](NodeId id, Fact::Kind k) { return facts_[std::size_t(id)].kind == k && facts_[std::size_t(id)].mask == m; };
    auto fill = [&](NodeId id, float& v) {
      if (is(id, Fact::zero)) v = 0.f;
      else if (is(id, Fact::ninf)) v = -std::numeric_limits<float>::infinity();
      else return false;
      return true;
    };
    auto limits = std::make_shared<RowLimits>();
    for (const FusedInstr& f : grp.program) {  // row sums read zeros past ext[r], maxima -inf
      if (f.reduced && f.op == OpKind::sum && !is(node_of(f.a), Fact::zero)) return nullptr;
      if (f.reduced && f.op == OpKind::max && !is(node_of(f.a), Fact::ninf)) return nullptr;
    }
    for (NodeId id : grp.stored) {  // what a stored member holds past ext[r]
      const std::size_t k = std::size_t(std::find(grp.members.begin(), grp.members.end(), id) - grp.members.begin());
      float v = 0;
      if (k >= grp.program.size() || (!grp.program[k].reduced && !fill(id, v))) return nullptr;
      limits->fill.push_back(v);  // a row value (reduced) needs none
    }
    float rv = 0;
    if (!fill(grp.root, rv)) return nullptr;
    limits->fill.push_back(rv);
    const std::vector<i64> ext = row_extents(g_, m);
    if (ext.empty()) return nullptr;
    const i64 W = i64(simd::width);
    i64 done = 0;
    for (i64 e : ext) {
      limits->len.push_back(std::min(C, (e + W - 1) / W * W));
      done += limits->len.back();
    }
    limits->fraction = double(done) / double(R * C);
    if (done == R * C) return nullptr;
    return limits;
  }

  std::vector<MaskedProduct> products(std::span<const NodeId> order) {
    std::vector<MaskedProduct> out(std::size_t(g_.size()));
    for (NodeId id : order) {
      const Node& n = g_.node(id);
      if (n.op != OpKind::matmul || n.dtype != DType::f32) continue;
      const Fact& a = facts_[std::size_t(n.inputs[0])];
      if (a.kind == Fact::zero && fits(g_.node(n.inputs[0]).shape, g_.node(a.mask).shape)) {
        out[std::size_t(id)] = {MaskedProduct::skip_k, a.mask};
        continue;
      }
      for (NodeId m : masks_)
        if (fits(n.shape, g_.node(m).shape) && dont_care(id, m)) {
          out[std::size_t(id)] = {MaskedProduct::skip_out, m};
          break;
        }
    }
    return out;
  }

 private:
  bool is_mask(NodeId id) {
    auto it = mask_ok_.find(id);
    if (it == mask_ok_.end()) {
      it = mask_ok_.emplace(id, !row_extents(g_, id).empty()).first;
      if (it->second) masks_.push_back(id);
    }
    return it->second;
  }

  // b is a row vector against out: (..., 1) or a scalar, so it adds the same to every
  // entry of a row (finite, since the row has an entry the mask keeps).
  bool row_vector(NodeId b, const Shape& out) const {
    const Shape& s = g_.node(b).shape;
    return numel(s) == 1 || (s.size() == out.size() && s.back() == 1);
  }

  Fact infer(NodeId id) {
    const Node& n = g_.node(id);
    if (n.dtype != DType::f32 || n.inputs.empty()) return {};
    auto fact = [&](int i) { return facts_[std::size_t(n.inputs[std::size_t(i)])]; };
    auto same_shape = [&](int i) { return g_.node(n.inputs[std::size_t(i)]).shape == n.shape; };
    switch (n.op) {
      case OpKind::where: {
        float c = 0;
        if (!is_mask(n.inputs[0]) || !fits(n.shape, g_.node(n.inputs[0]).shape) || !scalar_constant(g_, n.inputs[2], c))
          return {};
        if (c == 0.f) return {Fact::zero, n.inputs[0]};
        if (std::isinf(c) && c < 0) return {Fact::ninf, n.inputs[0]};
        return {};
      }
      case OpKind::sub:  // -inf - (a row's finite shift) = -inf
        if (fact(0).kind == Fact::ninf && same_shape(0) && row_vector(n.inputs[1], n.shape)) return fact(0);
        return {};
      case OpKind::add:
        for (int i : {0, 1})
          if (fact(i).kind == Fact::ninf && same_shape(i) && row_vector(n.inputs[std::size_t(1 - i)], n.shape))
            return fact(i);
        if (fact(0).kind == Fact::zero && fact(1).kind == Fact::zero && fact(0).mask == fact(1).mask && same_shape(0) &&
            same_shape(1))
          return fact(0);
        return {};
      case OpKind::mul: {
        for (int i : {0, 1})
          if (fact(i).kind == Fact::zero && same_shape(i)) return fact(i);  // 0 * finite
        float c = 0;
        for (int i : {0, 1})
          if (fact(i).kind == Fact::ninf && same_shape(i) && scalar_constant(g_, n.inputs[std::size_t(1 - i)], c) &&
              c > 0 && std::isfinite(c))
            return fact(i);
        return {};
      }
      case OpKind::div:  // 0 / finite nonzero
        if (fact(0).kind == Fact::zero && same_shape(0)) return fact(0);
        return {};
      case OpKind::neg:
        if (fact(0).kind == Fact::zero) return fact(0);
        return {};
      case OpKind::exp:  // exp(-inf) = 0
        if (fact(0).kind == Fact::ninf) return {Fact::zero, fact(0).mask};
        return {};
      default:
        return {};
    }
  }

  // No value read later depends on x's entries where mask m is 0: every reader, followed
  // through same-shape element-wise ops, meets where(m, ., .) on its kept side or a
  // multiplication by a value that is 0 where m is 0.
  bool dont_care(NodeId x, NodeId m) {
    const auto key = (std::uint64_t(std::uint32_t(x)) << 32) | std::uint32_t(m);
    if (auto it = dont_care_.find(key); it != dont_care_.end()) return it->second;
    dont_care_[key] = false;  // a DAG has no cycles; this only guards the recursion
    bool ok = !kept_[std::size_t(x)] && !readers_[std::size_t(x)].empty();
    const Shape& xs = g_.node(x).shape;
    for (NodeId r : readers_[std::size_t(x)]) {
      if (!ok) break;
      const Node& rn = g_.node(r);
      if (rn.op == OpKind::where && rn.inputs[0] == m && rn.inputs[1] == x && rn.inputs[2] != x) continue;
      if (rn.op == OpKind::mul && rn.shape == xs) {
        const NodeId other = rn.inputs[0] == x ? rn.inputs[1] : rn.inputs[0];
        const Fact& f = facts_[std::size_t(other)];
        if (other != x && f.kind == Fact::zero && f.mask == m && g_.node(other).shape == xs) continue;
      }
      ok = op_arithmetic(rn.op) && rn.shape == xs && dont_care(r, m);
    }
    dont_care_[key] = ok;
    return ok;
  }

  const Graph& g_;
  std::vector<Fact> facts_;
  std::vector<std::vector<NodeId>> readers_;
  std::vector<char> kept_;
  std::unordered_map<NodeId, bool> mask_ok_;
  std::vector<NodeId> masks_;
  std::unordered_map<std::uint64_t, bool> dont_care_;
};

}  // namespace

MaskedPlan find_masked(const Graph& g, std::span<const NodeId> order, std::span<const NodeId> kept,
                       const Fusion& fusion) {
  Analysis a(g, order, kept);
  MaskedPlan plan{a.products(order), {}};
  for (const FusedGroup& grp : fusion.groups) plan.rows.push_back(a.rows(grp));
  return plan;
}

MaskedBlocks masked_blocks(const Graph& g, const Node& n, MaskedProduct p) {
  MaskedBlocks b;
  if (p.kind == MaskedProduct::none) return b;
  const std::vector<i64> ext = row_extents(g, p.mask);
  GG_CHECK(!ext.empty());
  const Shape& ms = g.node(p.mask).shape;
  const i64 R = ms[ms.size() - 2], C = ms.back();
  b.kind = p.kind;
  b.rows = kBlockRows;
  double done = 0, full = 0;
  if (p.kind == MaskedProduct::skip_k && n.attrs.trans_a) {  // rows c of the output sum terms r >= first[c]
    std::vector<i64> first(std::size_t(C), R);
    for (i64 c = 0; c < C; ++c)
      for (i64 r = 0; r < R; ++r)
        if (ext[std::size_t(r)] > c) {
          first[std::size_t(c)] = r;
          break;
        }
    for (i64 c0 = 0; c0 < C; c0 += b.rows) {
      const i64 c1 = std::min(C, c0 + b.rows);
      b.limit.push_back(first[std::size_t(c0)]);  // first[] never decreases
      done += double(c1 - c0) * double(R - first[std::size_t(c0)]);
    }
    full = double(C) * double(R);
  } else {  // rows r of the output: columns (skip_out) or terms (skip_k) [0, ext[r])
    for (i64 r0 = 0; r0 < R; r0 += b.rows) {
      const i64 r1 = std::min(R, r0 + b.rows);
      const i64 lim = *std::max_element(ext.begin() + r0, ext.begin() + r1);
      b.limit.push_back(lim);
      done += double(r1 - r0) * double(lim);
    }
    full = double(R) * double(C);
  }
  b.fraction = done / full;
  return b;
}

void slice_matmul(const Node& n, const MaskedBlocks* masked, std::span<const View> in, const View& out,
                  SliceStrides ld) {
  const Shape& sa = *in[0].shape;
  const Shape& sb = *in[1].shape;
  const bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
  const i64 a0 = sa[sa.size() - 2], a1 = sa.back(), b0 = sb[sb.size() - 2], b1 = sb.back();
  const i64 M = ta ? a1 : a0, K = ta ? a0 : a1, N = tb ? b0 : b1;
  const float* A = in[0].f();
  const float* B = in[1].f();
  float* Cm = out.f();
  const i64 lda = ld.a ? ld.a : a1, ldb = ld.b ? ld.b : b1, ldc = ld.c ? ld.c : N;
  if (n.attrs.bf16 && !masked) {
    gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, Cm, ldc);
    return;
  }
  if (!masked) {
    gemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, Cm, ldc);
    return;
  }
  const MaskedBlocks& blocks = *masked;
  // op(A) rows [i0, i0 + m), op(B) columns [0, cols), terms [k0, k1) into C rows i0.., as the
  // full product would sum them: split where its sum splits in two halves (gemm_depth_split),
  // each half in passes of the GEMM's depth block from its own start, the second half added
  // last.
  const i64 K0 = gemm_depth_split(ta, tb, M, N, K);
  // op(B) columns [j0, j0 + cols) into C columns j0..
  auto passes = [&](i64 i0, i64 m, i64 j0, i64 cols, i64 k0, i64 k1, i64 base, float* c, i64 ldd) {
    const float* a = A + (ta ? i0 : i0 * lda);
    const float* b = B + (tb ? j0 * ldb : j0);
    for (i64 k = k0; k < k1;) {
      const i64 e = std::min(k1, base + ((k - base) / gemm_depth_block + 1) * gemm_depth_block);
      gemm(ta, tb, m, cols, e - k, 1.f, a + (ta ? k * lda : k), lda, b + (tb ? k : k * ldb), ldb, k == k0 ? 0.f : 1.f,
           c, ldd);
      k = e;
    }
  };
  thread_local std::vector<float> second;
  // bf16: op(B) rounded and packed once for all the blocks (each block's part of it is a
  // range of its panels and pairs).
  std::optional<Bf16PackedB> packed;
  if (n.attrs.bf16) packed.emplace(tb, K, N, B, ldb);
  auto product = [&](i64 i0, i64 m, i64 j0, i64 cols, i64 k0, i64 k1) {
    float* c = Cm + i0 * ldc + j0;
    if (packed) {
      // One sum in VDPBF16PS's pairs of terms (2p, 2p + 1): [k0, k1) widened to whole pairs,
      // so that each pair is one of the full product's (the terms added are the mask's
      // zeros, which leave every finite sum as it is).
      k0 -= k0 % 2;
      k1 = std::min(K, k1 + k1 % 2);
      const float* a = A + (ta ? i0 : i0 * lda);
      if (j0 % 16 == 0) return packed->product(ta, m, a, lda, j0, cols, k0, k1, c, ldc);
      gemm_bf16(ta, tb, m, cols, k1 - k0, 1.f, a + (ta ? k0 * lda : k0), lda, B + (tb ? j0 * ldb + k0 : j0 + k0 * ldb),
                ldb, 0.f, c, ldc);  // columns from inside a panel: packed apart
      return;
    }
    const i64 first_end = std::min(k1, K0 ? K0 : K);
    if (k0 < first_end) {
      passes(i0, m, j0, cols, k0, first_end, 0, c, ldc);
    } else {
      for (i64 i = 0; i < m; ++i) std::memset(c + i * ldc, 0, std::size_t(cols) * sizeof(float));
    }
    if (const i64 s0 = std::max(k0, K0); K0 && s0 < k1) {  // the second half: apart, then added
      second.resize(std::size_t(m * cols));
      passes(i0, m, j0, cols, s0, k1, K0, second.data(), cols);
      for (i64 i = 0; i < m; ++i)
        for (i64 j = 0; j < cols; ++j) c[i * ldc + j] += second[std::size_t(i * cols + j)];
    }
  };
  auto zero_skipped = [&](std::size_t blk) {  // skip_out: row block blk's columns past its limit
    const i64 i0 = i64(blk) * blocks.rows, m = std::min(M - i0, blocks.rows), lim = blocks.limit[blk];
    if (lim < N)
      for (i64 i = i0; i < i0 + m; ++i) std::memset(Cm + i * ldc + lim, 0, std::size_t(N - lim) * sizeof(float));
  };
  // skip_out with limits that never decrease (causal attention's staircase): the same
  // blocks, computed a column band at a time instead of a row block at a time. Band
  // [limit[b-1], limit[b]) is needed by row blocks b onwards: one product of all those rows,
  // which packs each sliver of op(B) once and runs it down every row that needs it, where a
  // row block's product packed it again for each block (and ran it down 32 rows). Each value
  // is the same sum in the same order either way, so the bits do not change. The skipped
  // columns are zeroed after all the bands (measured faster than after each band).
  if (blocks.kind == MaskedProduct::skip_out && std::is_sorted(blocks.limit.begin(), blocks.limit.end())) {
    i64 from = 0;
    for (std::size_t blk = 0; blk < blocks.limit.size(); ++blk)
      if (const i64 i0 = i64(blk) * blocks.rows, lim = blocks.limit[blk]; lim > from) {
        product(i0, M - i0, from, lim - from, 0, K);
        from = lim;
      }
    for (std::size_t blk = 0; blk < blocks.limit.size(); ++blk) zero_skipped(blk);
    return;
  }
  for (std::size_t blk = 0; blk < blocks.limit.size(); ++blk) {
    const i64 i0 = i64(blk) * blocks.rows, m = std::min(M - i0, blocks.rows), lim = blocks.limit[blk];
    if (blocks.kind == MaskedProduct::skip_out) {
      product(i0, m, 0, lim, 0, K);
      zero_skipped(blk);
    } else if (ta) {
      product(i0, m, 0, N, lim, K);
    } else {
      product(i0, m, 0, N, 0, lim);
    }
  }
}

}  // namespace gg
