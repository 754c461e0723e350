// Reductions over one axis: sum, max and argmax, with keepdim. A tensor is viewed as
// (outer, n, inner) around the reduced axis; contiguous rows (inner == 1) reduce with
// SIMD dot-style loops, strided ones accumulate whole inner rows at a time. argmax is
// scalar code (it is for decoding and accuracy, not for the training step).
#include <cmath>
#include <vector>

#include "ops/primitives/kernel_util.h"
#include "ops/cpu/simd.h"

namespace gg {
namespace {

void infer_reduce(const Graph& g, Node& n) {
  detail::require_dtype(g, n, 0, DType::f32, "operand");
  const Shape& x = g.node(n.inputs[0]).shape;
  if (x.empty()) g.fail(n, fmt::format("cannot reduce a scalar {}", detail::describe(g, n.inputs[0])));
  n.attrs.axis = detail::norm_axis(g, n, n.attrs.axis, std::int64_t(x.size()), n.inputs[0]);
  if (x[std::size_t(n.attrs.axis)] == 0)
    g.fail(n, fmt::format("axis {} of {} is empty", n.attrs.axis, detail::describe(g, n.inputs[0])));
  n.shape = x;
  if (n.attrs.keepdim) n.shape[std::size_t(n.attrs.axis)] = 1;
  else n.shape.erase(n.shape.begin() + n.attrs.axis);
  n.dtype = DType::f32;
}

// The gradient's shape with the reduced axis kept as 1, so it broadcasts onto x.
NodeId keepdim_view(GradArgs& a, NodeId v) {
  const Node& n = a.n();
  if (n.attrs.keepdim) return v;
  Shape s = a.g.node(n.inputs[0]).shape;
  s[std::size_t(n.attrs.axis)] = 1;
  return op::reshape(a.g, v, s);
}

// Rows of a strided reduction over many rows folded apart, then in order (reduce_kernel).
constexpr std::int64_t reduce_chunk_rows = 64;

// out[o, i] = reduce_j x[o, j, i], with `row` reducing a contiguous run and `comb(acc, v)`
// (a generic lambda: floats or registers) folding value v of row j into the accumulator.
template <class Row, class Comb>
void reduce_kernel(const KernelArgs& a, Row row, Comb comb) {
  auto sp = detail::split_at(*a.in[0].shape, a.node.attrs.axis);
  const float* x = a.in[0].f();
  float* o = a.out.f();
  if (sp.inner == 1) {
    parallel_for(sp.outer, std::max<std::int64_t>(1, 8192 / sp.n), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) o[i] = row(std::size_t(sp.n), x + i * sp.n);
    });
    return;
  }
  // out[c0:c1] = rows [r0, r1) of the (n, inner) slab xi folded in order, column by column.
  // Four registers of columns at a time stay in registers down the rows (folding whole
  // rows into the output in memory took several times as long).
  auto fold = [&](const float* xi, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1, float* out) {
    std::int64_t c = c0;
#ifndef GG_SCALAR
    constexpr std::int64_t W = std::int64_t(simd::width);
    for (; c + 4 * W <= c1; c += 4 * W) {
      simd::vf acc[4];
      for (int v = 0; v < 4; ++v) acc[v] = simd::load(xi + r0 * sp.inner + c + v * W);
      for (std::int64_t j = r0 + 1; j < r1; ++j) {
        const float* r = xi + j * sp.inner + c;
        for (int v = 0; v < 4; ++v) acc[v] = comb(acc[v], simd::load(r + v * W));
      }
      for (int v = 0; v < 4; ++v) simd::store(out + c + v * W, acc[v]);
    }
    for (; c + W <= c1; c += W) {
      simd::vf acc = simd::load(xi + r0 * sp.inner + c);
      for (std::int64_t j = r0 + 1; j < r1; ++j) acc = comb(acc, simd::load(xi + j * sp.inner + c));
      simd::store(out + c, acc);
    }
#endif
    for (; c < c1; ++c) {
      float acc = xi[r0 * sp.inner + c];
      for (std::int64_t j = r0 + 1; j < r1; ++j) acc = comb(acc, xi[j * sp.inner + c]);
      out[c] = acc;
    }
  };
  if (sp.n >= 2 * reduce_chunk_rows) {
    // Many rows (a bias gradient: (B*T, D) -> (D)): each chunk of reduce_chunk_rows rows is
    // folded on its own (a 1/64 of x for the partials), then the chunks' partials in order.
    // The chunks depend on the shape alone, so the bits do not depend on the threads; the threads
    // take whole chunks, the rows the product that made x left in their own cache (split by
    // columns, each thread read every row, half of them from the other core: slower
    // at 2 threads than at 1).
    const std::int64_t chunks = (sp.n + reduce_chunk_rows - 1) / reduce_chunk_rows;
    std::vector<float> part(std::size_t(sp.outer * chunks * sp.inner));
    parallel_for(sp.outer * chunks, std::max<std::int64_t>(1, 4096 / (reduce_chunk_rows * sp.inner)),
                 [&](std::int64_t b, std::int64_t e) {
                   for (std::int64_t q = b; q < e; ++q) {
                     const std::int64_t i = q / chunks, r0 = q % chunks * reduce_chunk_rows;
                     fold(x + i * sp.n * sp.inner, r0, std::min(sp.n, r0 + reduce_chunk_rows), 0, sp.inner,
                          part.data() + q * sp.inner);
                   }
                 });
    for (std::int64_t i = 0; i < sp.outer; ++i) {
      float* oi = o + i * sp.inner;
      const float* pi = part.data() + i * chunks * sp.inner;  // pi: (chunks, inner)
      std::int64_t c = 0;
#ifndef GG_SCALAR
      for (; c + std::int64_t(simd::width) <= sp.inner; c += std::int64_t(simd::width)) {
        simd::vf acc = simd::load(pi + c);
        for (std::int64_t k = 1; k < chunks; ++k) acc = comb(acc, simd::load(pi + k * sp.inner + c));
        simd::store(oi + c, acc);
      }
#endif
      for (; c < sp.inner; ++c) {
        float acc = pi[c];
        for (std::int64_t k = 1; k < chunks; ++k) acc = comb(acc, pi[k * sp.inner + c]);
        oi[c] = acc;
      }
    }
    return;
  }
  // Columns [c0, c1) of every (n, inner) slab in [b, e): each column folds its n values in
  // order, whoever runs it, so the split never changes a bit.
  parallel_for(sp.outer, std::max<std::int64_t>(1, 8192 / (sp.n * sp.inner)), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) fold(x + i * sp.n * sp.inner, 0, sp.n, 0, sp.inner, o + i * sp.inner);
  });
}

// Tangent: the input's constant axes, less the reduced one (kept as size 1 with keepdim).
void tangent_reduce(const Graph&, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
  const std::vector<char>& x = in[0]->constant;
  const std::size_t k = std::size_t(n.attrs.axis);
  for (std::size_t d = 0, e = 0; d < n.shape.size(); ++d, ++e) {
    if (e == k && !n.attrs.keepdim) ++e;
    out.constant[d] = x[e];
  }
}

// In double: x: (outer, n, inner) -> out: (outer, inner), folding each column in order.
void reduce_f64(const F64Args& a) {
  const f64::Split3 s = f64::split_at(a.in(0).shape, a.n.attrs.axis);
  const std::vector<double>& x = a.in(0).v;
  const OpKind op = a.n.op;
  for (std::int64_t i = 0; i < s.outer; ++i)
    for (std::int64_t c = 0; c < s.inner; ++c) {
      auto at = [&](std::int64_t j) { return x[std::size_t((i * s.n + j) * s.inner + c)]; };
      double r = at(0);
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < s.n; ++j) {
        const double v = at(j);
        if (op == OpKind::sum) r += v;
        else if (op == OpKind::max) r = std::isnan(r) || std::isnan(v) ? NAN : std::max(r, v);
        else if (!std::isnan(r) && (v > r || std::isnan(v))) {  // argmax: first on ties, NaN is largest
          r = v;
          best = j;
        }
      }
      a.out.v[std::size_t(i * s.inner + c)] = op == OpKind::argmax ? double(best) : r;
    }
}

// Over an axis of size 1 with keepdim: x itself.
NodeId identity_reduce(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs&) {
  return same_value_as(t, n, ins[0]);
}

std::string reduce_attrs(const Node& n) { return fmt::format("axis={}{}", n.attrs.axis, n.attrs.keepdim ? ", keepdim" : ""); }

}  // namespace

// ---- sum ---------------------------------------------------------------------------
// d/dx_j sum_j x_j = 1: the gradient is broadcast back along the axis
const OpRule sum_rule = {
    OpClass::reduction,
    infer_reduce,
    [](const KernelArgs& a) {
      reduce_kernel(a, [](std::size_t n, const float* r) { return simd::sum(n, r); },
                    [](auto acc, auto v) { return acc + v; });
    },
    [](GradArgs& a) {
      a.gin[0] = op::expand(a.g, keepdim_view(a, a.gout), a.g.node(a.in(0)).shape);
    },
    tangent_reduce,
    reduce_f64,
    nullptr,
    identity_reduce,
    reduce_attrs};

// ---- max ---------------------------------------------------------------------------
// d/dx_j max_j x_j = [x_j == max] (every tied maximum receives the gradient)
const OpRule max_rule = {
    OpClass::reduction,
    infer_reduce,
    [](const KernelArgs& a) {
      reduce_kernel(a, [](std::size_t n, const float* r) { return simd::max_of(n, r); },
                    [](auto acc, auto v) { return simd::max(acc, v); });
    },
    [](GradArgs& a) {
      NodeId hit = op::compare(a.g, a.in(0), keepdim_view(a, a.node), Cmp::eq);
      a.gin[0] = op::mul(a.g, hit, keepdim_view(a, a.gout));
    },
    tangent_reduce,
    reduce_f64,
    nullptr,
    identity_reduce,
    reduce_attrs};

// ---- argmax ------------------------------------------------------------------------
// A step function of x with i32 output: no gradient flows through it. Like torch.argmax
// on CPU, the first index wins on ties and the first NaN counts as the largest entry.
const OpRule argmax_rule = {
    OpClass::reduction,
    [](const Graph& g, Node& n) {
      infer_reduce(g, n);
      n.dtype = DType::i32;
    },
    [](const KernelArgs& a) {
      auto sp = detail::split_at(*a.in[0].shape, a.node.attrs.axis);
      const float* x = a.in[0].f();  // x: (outer, n, inner)
      std::int32_t* o = a.out.i();   // out: (outer, inner)
      parallel_for(sp.outer, std::max<std::int64_t>(1, 8192 / (sp.n * sp.inner)), [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i)
          for (std::int64_t c = 0; c < sp.inner; ++c) {
            const float* xi = x + i * sp.n * sp.inner + c;  // xi[j * inner]: row j of column c
            float best = xi[0];
            std::int32_t at = 0;
            for (std::int64_t j = 1; j < sp.n && !std::isnan(best); ++j) {
              const float v = xi[j * sp.inner];
              if (v > best || std::isnan(v)) {
                best = v;
                at = std::int32_t(j);
              }
            }
            o[i * sp.inner + c] = at;
          }
      });
    },
    nullptr,
    nullptr,
    reduce_f64,
    nullptr,
    nullptr,
    reduce_attrs};

}  // namespace gg
