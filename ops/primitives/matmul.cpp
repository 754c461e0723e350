// Batched matrix multiply with broadcast batch dims and optionally transposed operands.
// Every product goes through gg::gemm (ops/cpu/gemm.h), or gg::gemm_bf16 (ops/cpu/bf16.h) for
// a product with bf16 operands (Attrs::bf16); this file only maps batches onto them.
#include "ops/cpu/bf16.h"
#include "ops/cpu/gemm.h"
#include "ops/primitives/kernel_util.h"

namespace gg {
namespace {

struct MatDims {
  Shape batch;  // broadcast batch shape
  std::int64_t m, k, n;
};

MatDims dims_of(const Shape& a, const Shape& b, bool ta, bool tb) {
  MatDims d;
  std::int64_t ra = std::int64_t(a.size()), rb = std::int64_t(b.size());
  d.m = ta ? a[std::size_t(ra - 1)] : a[std::size_t(ra - 2)];
  d.k = ta ? a[std::size_t(ra - 2)] : a[std::size_t(ra - 1)];
  d.n = tb ? b[std::size_t(rb - 2)] : b[std::size_t(rb - 1)];
  d.batch = *op::broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  return d;
}

// Element offset of each batch's matrix in a tensor with batch dims `own` broadcast to `batch`.
std::vector<std::int64_t> batch_offsets(const Shape& batch, const Shape& own, std::int64_t mat) {
  std::int64_t count = numel(batch);
  std::vector<std::int64_t> offs(std::size_t(count), 0);
  const int r = int(batch.size()), ro = int(own.size());
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t rem = i, off = 0, stride = mat;
    for (int d = r - 1; d >= 0; --d) {
      std::int64_t idx = rem % batch[std::size_t(d)];
      rem /= batch[std::size_t(d)];
      int od = d - (r - ro);
      if (od >= 0) {
        if (own[std::size_t(od)] != 1) off += idx * stride;
        stride *= own[std::size_t(od)];
      }
    }
    offs[std::size_t(i)] = off;
  }
  return offs;
}

// Tangent: out (batch..., M, N) = op(A) op(B). With only B varying, d out = op(A) d op(B)
// is constant along N when d op(B) is; along a batch axis when it is and A is broadcast
// there. Symmetrically for A. Both varying: constant along nothing (conservative).
void tangent_matmul(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
  if (tangent_varies(in[0]) && tangent_varies(in[1])) return;
  std::vector<char>& c = out.constant;
  const std::size_t r = n.shape.size();
  const std::size_t v = tangent_varies(in[0]) ? 0 : 1, o = 1 - v;
  const Shape& sv = g.node(n.inputs[v]).shape;
  const Shape& so = g.node(n.inputs[o]).shape;
  const std::vector<char>& cv = in[v]->constant;
  const bool tv = v == 0 ? n.attrs.trans_a : n.attrs.trans_b;
  // The varying operand's axis that becomes out's M (for A) or N (for B).
  const std::size_t kept = v == 0 ? (tv ? sv.size() - 1 : sv.size() - 2) : (tv ? sv.size() - 2 : sv.size() - 1);
  c[v == 0 ? r - 2 : r - 1] = cv[kept];
  const std::size_t bv = sv.size() - 2, bo = so.size() - 2;  // batch ranks
  for (std::size_t d = 0; d + 2 < r; ++d) {
    const std::size_t back = r - 2 - d;  // batch axes counted from the right
    const bool v_const = back > bv || sv[bv - back] == 1 || cv[bv - back];
    const bool o_bcast = back > bo || so[bo - back] == 1;
    c[d] = v_const && o_bcast;
  }
}

// In double: each batch's product by the textbook triple loop. A bf16 product too, unrounded: the
// f64 execution is the exact function, the reference its rounding is measured against.
void matmul_f64(const F64Args& a) {
  const Node& n = a.n;
  const Shape& sa = a.in(0).shape;
  const Shape& sb = a.in(1).shape;
  const bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
  const std::int64_t M = n.shape[n.shape.size() - 2], Nn = n.shape.back();
  const std::int64_t K = ta ? sa[sa.size() - 2] : sa.back();
  const Shape batch(n.shape.begin(), n.shape.end() - 2);
  auto stA = f64::aligned_strides(batch, Shape(sa.begin(), sa.end() - 2));
  auto stB = f64::aligned_strides(batch, Shape(sb.begin(), sb.end() - 2));
  const std::int64_t matA = sa.back() * sa[sa.size() - 2], matB = sb.back() * sb[sb.size() - 2];
  const std::int64_t lda = sa.back(), ldb = sb.back();
  for (std::int64_t b = 0; b < numel(batch); ++b) {
    const double* A = a.in(0).v.data() + f64::source_index(batch, stA, b) * matA;
    const double* B = a.in(1).v.data() + f64::source_index(batch, stB, b) * matB;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < Nn; ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k)
          acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
        a.out.v[std::size_t((b * M + i) * Nn + j)] = acc;
      }
  }
}

}  // namespace

// ---- matmul ------------------------------------------------------------------------
// C = op(A) op(B):  d op(A) = G op(B)^T,  d op(B) = op(A)^T G
const OpRule matmul_rule = {
    OpClass::product,
    [](const Graph& g, Node& n) {
      detail::require_dtype(g, n, 0, DType::f32, "left operand");
      detail::require_dtype(g, n, 1, DType::f32, "right operand");
      const Shape& a = g.node(n.inputs[0]).shape;
      const Shape& b = g.node(n.inputs[1]).shape;
      if (a.size() < 2 || b.size() < 2)
        g.fail(n, fmt::format("operands need at least 2 dims: {} @ {}", detail::describe(g, n.inputs[0]),
                              detail::describe(g, n.inputs[1])));
      bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
      std::int64_t ka = ta ? a[a.size() - 2] : a[a.size() - 1];
      std::int64_t kb = tb ? b[b.size() - 1] : b[b.size() - 2];
      if (ka != kb)
        g.fail(n, fmt::format("inner dims differ: {}{} @ {}{}: {} vs {}", to_string(a), ta ? "^T" : "",
                              to_string(b), tb ? "^T" : "", ka, kb) +
                      fmt::format(" (left '{}', right '{}')", g.node(n.inputs[0]).name, g.node(n.inputs[1]).name));
      int bad = 0;
      if (!op::broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2), &bad))
        g.fail(n, fmt::format("batch dims do not broadcast: {} @ {}: batch dim {}", detail::describe(g, n.inputs[0]),
                              detail::describe(g, n.inputs[1]), bad));
      MatDims d = dims_of(a, b, ta, tb);
      n.shape = d.batch;
      n.shape.push_back(d.m);
      n.shape.push_back(d.n);
      n.dtype = DType::f32;
    },
    [](const KernelArgs& a) {
      const Shape& sa = *a.in[0].shape;
      const Shape& sb = *a.in[1].shape;
      const bool ta = a.node.attrs.trans_a, tb = a.node.attrs.trans_b;
      MatDims d = dims_of(sa, sb, ta, tb);
      const float* A = a.in[0].f();
      const float* B = a.in[1].f();
      float* C = a.out.f();
      const std::int64_t lda = sa.back(), ldb = sb.back();
      const bool bf16 = a.node.attrs.bf16;
      // One product: the f32 GEMM or the bf16 one, each reporting its rows as they are final.
      auto product = [bf16](bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
                            std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc,
                            const GemmRowsDone* rows_done) {
        if (!bf16) return gemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc, rows_done);
        gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc, bf16_path(), rows_done);
      };
      if (sb.size() == 2 && !ta) {  // (batch..., M, K) @ (K, N): one tall GEMM
        product(false, tb, numel(d.batch) * d.m, d.n, d.k, A, lda, B, ldb, C, d.n, a.rows_done);
        return;
      }
      Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
      auto oa = batch_offsets(d.batch, ba, sa[sa.size() - 1] * sa[sa.size() - 2]);
      auto ob = batch_offsets(d.batch, bb, sb[sb.size() - 1] * sb[sb.size() - 2]);
      const std::int64_t count = std::int64_t(oa.size()), mn = d.m * d.n;
      // Small matrices: one batch per task; large ones: GEMM threads itself.
      const std::int64_t grain = d.m * d.n * d.k >= (1 << 18) ? count : 1;
      parallel_for(count, grain, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t i = b0; i < b1; ++i)
          product(ta, tb, d.m, d.n, d.k, A + oa[std::size_t(i)], lda, B + ob[std::size_t(i)], ldb, C + i * mn, d.n,
                  nullptr);
      });
      if (a.rows_done) (*a.rows_done)(0, count * d.m);
    },
    [](GradArgs& a) {
      Graph& g = a.g;
      const Node& n = a.n();
      const bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
      // A bf16 product's gradient products are bf16 too (the rounding passes gradients
      // through unchanged, as a cast does).
      Bf16Products precision(g, g.bf16_products() || n.attrs.bf16);
      NodeId A = a.in(0), B = a.in(1), G = a.gout;
      if (a.needs[0])
        a.gin[0] = ta ? op::matmul(g, B, G, tb, true) : op::matmul(g, G, B, false, !tb);
      if (a.needs[1]) {
        const Shape& sa = g.node(A).shape;
        if (g.node(B).shape.size() == 2 && sa.size() > 2 && !ta) {
          // B is shared by every batch: contract over all rows at once.
          NodeId A2 = op::reshape(g, A, {-1, sa.back()});
          NodeId G2 = op::reshape(g, G, {-1, g.node(G).shape.back()});
          a.gin[1] = tb ? op::matmul(g, G2, A2, true, false) : op::matmul(g, A2, G2, true, false);
        } else {
          a.gin[1] = tb ? op::matmul(g, G, A, true, ta) : op::matmul(g, A, G, !ta, false);
        }
      }
    },
    tangent_matmul,
    matmul_f64,
    nullptr,
    nullptr,
    [](const Node& n) -> std::string {
      std::vector<std::string> a;
      if (n.attrs.trans_a) a.push_back("trans_a");
      if (n.attrs.trans_b) a.push_back("trans_b");
      if (n.attrs.bf16) a.push_back("bf16");
      return fmt::format("{}", fmt::join(a, ", "));
    }};

}  // namespace gg
