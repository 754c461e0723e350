// Indexing: gather (x.take(index, axis), e.g. an embedding lookup) and its adjoint
// scatter_add. Indices are i32 and checked at run time; an index out of range throws
// GraphError naming the node, the index and the range.
#include <cstring>

#include "ops/primitives/kernel_util.h"

namespace gg {
namespace {

void check_index(const Node& n, const std::int32_t* idx, std::int64_t count, std::int64_t size) {
  for (std::int64_t i = 0; i < count; ++i)
    if (idx[i] < 0 || idx[i] >= size)
      throw GraphError(fmt::format("{} at {} ('{}'): index {} at position {} is out of range [0, {})", op_name(n.op),
                                   site_string(n.loc), n.name, idx[i], i, size));
}

// The f64 interpreter's check of its (double) indices.
void check_index_f64(const F64Args& a, const std::vector<double>& idx, std::int64_t size) {
  for (std::size_t c = 0; c < idx.size(); ++c)
    if (idx[c] < 0 || idx[c] >= double(size))
      a.g.fail(a.n, fmt::format("index {} at position {} is out of range [0, {})", idx[c], c, size));
}

}  // namespace

// ---- gather ------------------------------------------------------------------------
// d/dx x.take(i) = scatter_add(g, i): each row of g adds into the row it was read from
const OpRule gather_rule = {
    OpClass::indexing,
    [](const Graph& g, Node& n) {
      const Node& x = g.node(n.inputs[0]);
      const Node& i = g.node(n.inputs[1]);
      if (i.dtype != DType::i32)
        g.fail(n, fmt::format("index {} must be i32, got {}", detail::describe(g, n.inputs[1]), to_string(i.dtype)));
      if (x.shape.empty()) g.fail(n, fmt::format("cannot index a scalar {}", detail::describe(g, n.inputs[0])));
      n.attrs.axis = detail::norm_axis(g, n, n.attrs.axis, std::int64_t(x.shape.size()), n.inputs[0]);
      n.shape.assign(x.shape.begin(), x.shape.begin() + n.attrs.axis);
      n.shape.insert(n.shape.end(), i.shape.begin(), i.shape.end());
      n.shape.insert(n.shape.end(), x.shape.begin() + n.attrs.axis + 1, x.shape.end());
      n.dtype = x.dtype;
    },
    [](const KernelArgs& a) {
      auto sp = detail::split_at(*a.in[0].shape, a.node.attrs.axis);  // x: (outer, n, inner)
      const std::int64_t count = a.in[1].numel();                     // index: (count)
      const std::int32_t* idx = a.in[1].i();
      check_index(a.node, idx, count, sp.n);
      const std::uint32_t* x = static_cast<const std::uint32_t*>(a.in[0].data);
      std::uint32_t* o = static_cast<std::uint32_t*>(a.out.data);  // out: (outer, count, inner)
      parallel_for(sp.outer * count, std::max<std::int64_t>(1, 2048 / sp.inner), [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          std::int64_t oi = r / count, c = r % count;
          std::memcpy(o + r * sp.inner, x + (oi * sp.n + idx[c]) * sp.inner, std::size_t(sp.inner) * 4);
        }
      });
    },
    [](GradArgs& a) {
      const Node& n = a.n();
      const Shape& xs = a.g.node(a.in(0)).shape;
      if (a.needs[0])
        a.gin[0] = op::scatter_add(a.g, a.gout, a.in(1), n.attrs.axis, xs[std::size_t(n.attrs.axis)]);
    },
    // out = x.shape[:k] + index.shape + x.shape[k+1:]; the index has no tangent.
    [](const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
      const std::vector<char>& x = in[0]->constant;
      const std::size_t k = std::size_t(n.attrs.axis), ri = g.node(n.inputs[1]).shape.size();
      for (std::size_t d = 0; d < n.shape.size(); ++d) out.constant[d] = d < k ? x[d] : d < k + ri ? x[k] : x[d - ri + 1];
    },
    [](const F64Args& a) {
      const f64::Split3 s = f64::split_at(a.in(0).shape, a.n.attrs.axis);  // x: (outer, n, inner)
      const std::vector<double>& idx = a.in(1).v;                          // index: (count)
      const std::int64_t count = std::int64_t(idx.size());
      check_index_f64(a, idx, s.n);
      for (std::int64_t i = 0; i < s.outer; ++i)
        for (std::int64_t c = 0; c < count; ++c)
          for (std::int64_t k = 0; k < s.inner; ++k)
            a.out.v[std::size_t((i * count + c) * s.inner + k)] =
                a.in(0).v[std::size_t((i * s.n + std::int64_t(idx[std::size_t(c)])) * s.inner + k)];
    },
    nullptr,
    nullptr,
    [](const Node& n) { return fmt::format("axis={}", n.attrs.axis); }};

// ---- scatter_add -------------------------------------------------------------------
// d/dsrc scatter_add(src, i) = g.take(i)
const OpRule scatter_add_rule = {
    OpClass::indexing,
    [](const Graph& g, Node& n) {
      const Node& s = g.node(n.inputs[0]);
      const Node& i = g.node(n.inputs[1]);
      if (i.dtype != DType::i32)
        g.fail(n, fmt::format("index {} must be i32, got {}", detail::describe(g, n.inputs[1]), to_string(i.dtype)));
      detail::require_dtype(g, n, 0, DType::f32, "source");
      const std::int64_t axis = n.attrs.axis, r = std::int64_t(i.shape.size());
      if (axis < 0 || axis + r > std::int64_t(s.shape.size()))
        g.fail(n, fmt::format("axis {} with index {} does not fit source {}", axis, detail::describe(g, n.inputs[1]),
                              detail::describe(g, n.inputs[0])));
      for (std::int64_t d = 0; d < r; ++d)
        if (s.shape[std::size_t(axis + d)] != i.shape[std::size_t(d)])
          g.fail(n, fmt::format("source {} does not hold index {} at axis {}", detail::describe(g, n.inputs[0]),
                                detail::describe(g, n.inputs[1]), axis));
      if (n.attrs.end < 1) g.fail(n, fmt::format("output size {} along axis {} must be >= 1", n.attrs.end, axis));
      n.shape.assign(s.shape.begin(), s.shape.begin() + axis);
      n.shape.push_back(n.attrs.end);
      n.shape.insert(n.shape.end(), s.shape.begin() + axis + r, s.shape.end());
      n.dtype = DType::f32;
    },
    [](const KernelArgs& a) {
      auto so = detail::split_at(*a.out.shape, a.node.attrs.axis);  // out: (outer, size, inner)
      const std::int64_t count = a.in[1].numel();
      const std::int32_t* idx = a.in[1].i();
      check_index(a.node, idx, count, so.n);
      const float* s = a.in[0].f();  // src: (outer, count, inner)
      float* o = a.out.f();
      std::memset(o, 0, std::size_t(a.out.numel()) * 4);
      // Threads own disjoint column ranges of the inner dim, so rows add without races.
      parallel_for(so.inner, 64, [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t oi = 0; oi < so.outer; ++oi)
          for (std::int64_t c = 0; c < count; ++c) {
            const float* src = s + (oi * count + c) * so.inner;
            float* dst = o + (oi * so.n + idx[c]) * so.inner;
            for (std::int64_t j = c0; j < c1; ++j) dst[j] += src[j];
          }
      });
    },
    [](GradArgs& a) {
      if (a.needs[0]) a.gin[0] = op::gather(a.g, a.gout, a.in(1), a.n().attrs.axis);
    },
    nullptr,  // constant along nothing (conservative)
    [](const F64Args& a) {
      const f64::Split3 so = f64::split_at(a.out.shape, a.n.attrs.axis);  // out: (outer, size, inner)
      const std::vector<double>& idx = a.in(1).v;
      const std::int64_t count = std::int64_t(idx.size());
      check_index_f64(a, idx, so.n);
      for (std::int64_t i = 0; i < so.outer; ++i)
        for (std::int64_t c = 0; c < count; ++c)
          for (std::int64_t k = 0; k < so.inner; ++k)
            a.out.v[std::size_t((i * so.n + std::int64_t(idx[std::size_t(c)])) * so.inner + k)] +=
                a.in(0).v[std::size_t((i * count + c) * so.inner + k)];
    },
    nullptr,
    nullptr,
    [](const Node& n) { return fmt::format("axis={}, size={}", n.attrs.axis, n.attrs.end); }};

}  // namespace gg
