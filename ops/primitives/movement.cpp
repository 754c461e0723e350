// Data movement: reshape, permute, expand, slice, concat. No arithmetic; each kernel is
// a copy, and each gradient is the inverse movement.
#include <cstring>
#include <numeric>

#include "ops/primitives/kernel_util.h"

namespace gg {

using detail::describe;

namespace {

// In-axis of each out-axis for a reshape that keeps it intact (same size, same count of
// elements before it), or -1.
std::vector<int> reshape_axis_map(const Shape& in, const Shape& out) {
  std::vector<int> m(out.size(), -1);
  std::int64_t pin = 1;
  std::vector<std::int64_t> before_in(in.size());
  for (std::size_t d = 0; d < in.size(); ++d) {
    before_in[d] = pin;
    pin *= in[d];
  }
  std::int64_t pout = 1;
  for (std::size_t d = 0; d < out.size(); ++d) {
    for (std::size_t e = 0; e < in.size(); ++e)
      if (before_in[e] == pout && in[e] == out[d]) m[d] = int(e);
    pout *= out[d];
  }
  return m;
}

// Tangent of expand and slice: the input's constant axes, aligned.
void tangent_aligned(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
  out.constant = aligned_tangent(g, n, 0, in[0]);
}

// In double: out[i] = x[source of i] through aligned strides (expand).
void expand_f64(const F64Args& a) {
  auto st = f64::aligned_strides(a.out.shape, a.in(0).shape);
  for (std::int64_t i = 0; i < std::int64_t(a.out.v.size()); ++i)
    a.out.v[std::size_t(i)] = a.in(0).v[std::size_t(f64::source_index(a.out.shape, st, i))];
}

// reshape(reshape(x)) = reshape(x), expand(expand(x)) = expand(x); either to x's own shape is x.
NodeId identity_collapse(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs& attrs) {
  while (t.node(ins[0]).op == n.op && !t.node(ins[0]).attrs.no_grad) ins[0] = t.node(ins[0]).inputs[0];
  attrs.dims = n.shape;  // the resolved target (no -1)
  return same_value_as(t, n, ins[0]);
}

// An op that is x itself when its output has x's shape (a slice of the whole axis).
NodeId identity_same_shape(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs&) {
  return same_value_as(t, n, ins[0]);
}

bool is_identity_perm(const Shape& p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != std::int64_t(i)) return false;
  return true;
}

}  // namespace

// ---- reshape -----------------------------------------------------------------------
// d/dx reshape(x) = reshape(g, shape(x))
const OpRule reshape_rule = {
    OpClass::movement,
    [](const Graph& g, Node& n) {
      const Node& x = g.node(n.inputs[0]);
      Shape s = n.attrs.dims;
      int infer_at = -1;
      std::int64_t known = 1;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == -1 && infer_at < 0) infer_at = int(i);
        else if (s[i] < 0) g.fail(n, fmt::format("bad target shape {}: one -1 at most, others >= 0", to_string(s)));
        else known *= s[i];
      }
      if (infer_at >= 0) {
        if (known == 0 || numel(x.shape) % known != 0)
          g.fail(n, fmt::format("cannot infer -1 in {}: {} has {} elements", to_string(s), describe(g, n.inputs[0]),
                                numel(x.shape)));
        s[std::size_t(infer_at)] = numel(x.shape) / known;
      }
      if (numel(s) != numel(x.shape))
        g.fail(n, fmt::format("element count differs: {} has {} elements, target {} has {}",
                              describe(g, n.inputs[0]), numel(x.shape), to_string(s), numel(s)));
      n.attrs.dims = s;
      n.shape = s;
      n.dtype = x.dtype;
    },
    [](const KernelArgs& a) {
      if (a.out.data != a.in[0].data) std::memcpy(a.out.data, a.in[0].data, std::size_t(a.out.numel()) * 4);
    },
    [](GradArgs& a) { a.gin[0] = op::reshape(a.g, a.gout, a.g.node(a.in(0)).shape); },
    // An axis kept intact keeps its constancy; the others are constant along nothing.
    [](const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
      std::vector<int> m = reshape_axis_map(g.node(n.inputs[0]).shape, n.shape);
      for (std::size_t d = 0; d < n.shape.size(); ++d) out.constant[d] = m[d] >= 0 && in[0]->constant[std::size_t(m[d])];
    },
    [](const F64Args& a) { a.out.v = a.in(0).v; },
    nullptr,
    identity_collapse};

// ---- permute -----------------------------------------------------------------------
// d/dx permute(x, p) = permute(g, inverse(p))
const OpRule permute_rule = {
    OpClass::movement,
    [](const Graph& g, Node& n) {
      const Node& x = g.node(n.inputs[0]);
      const Shape& p = n.attrs.dims;
      const std::size_t r = x.shape.size();
      std::vector<char> seen(r, 0);
      bool ok = p.size() == r;
      for (std::size_t i = 0; ok && i < r; ++i) {
        ok = p[i] >= 0 && std::size_t(p[i]) < r && !seen[std::size_t(p[i])];
        if (ok) seen[std::size_t(p[i])] = 1;
      }
      if (!ok)
        g.fail(n, fmt::format("{} is not a permutation of the {} axes of {}", to_string(p), r, describe(g, n.inputs[0])));
      n.shape.resize(r);
      for (std::size_t i = 0; i < r; ++i) n.shape[i] = x.shape[std::size_t(p[i])];
      n.dtype = x.dtype;
    },
    [](const KernelArgs& a) {
      const Shape& xs = *a.in[0].shape;
      const Shape& os = *a.out.shape;
      const Shape& p = a.node.attrs.dims;
      const int r = int(os.size());
      if (r == 0) {
        std::memcpy(a.out.data, a.in[0].data, 4);
        return;
      }
      Shape xst = strides_of(xs), st(static_cast<std::size_t>(r));
      for (int i = 0; i < r; ++i) st[std::size_t(i)] = xst[std::size_t(p[std::size_t(i)])];  // input stride of out axis i
      const std::int64_t inner = os.back(), istride = st.back();
      const std::int64_t rows = numel(os) / std::max<std::int64_t>(inner, 1);
      const std::uint32_t* x = static_cast<const std::uint32_t*>(a.in[0].data);
      std::uint32_t* o = static_cast<std::uint32_t*>(a.out.data);
      // Rows of `inner` values are walked in the order of one side, `dims` (its outer
      // axes), where row k is at k * inner; the other side's row is found by an odometer
      // over `far` (its strides along those axes): a division per axis and row cost more
      // than copying a head's row of 32 values. (detail::broadcast_rows has the same kind of
      // odometer; a shared row walk measured markedly slower here on attention-sized
      // tensors, so this loop stays its own.) Axes 1 and 2 swapped (the attention's head
      // split and merge) run fastest walking the side whose last outer axis is far apart on
      // the other side (measured alone on both the split and the merge).
      auto walk = [&](const Shape& dims, const Shape& far, bool walk_out) {
        parallel_for(rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(inner, 1)),
                     [&dims, &far, x, o, inner, istride, r, walk_out](std::int64_t r0, std::int64_t r1) {
          Shape idx(static_cast<std::size_t>(r - 1));
          std::int64_t off = 0;
          for (std::int64_t d = r - 2, rem = r0; d >= 0; --d) {
            idx[std::size_t(d)] = rem % dims[std::size_t(d)];
            rem /= dims[std::size_t(d)];
            off += idx[std::size_t(d)] * far[std::size_t(d)];
          }
          for (std::int64_t row = r0; row < r1; ++row) {
            std::uint32_t* dst = walk_out ? o + row * inner : o + off;
            const std::uint32_t* src = walk_out ? x + off : x + row * inner;
            if (istride == 1) {  // 64-byte moves, inlined (a memcpy call per short row costs more)
              std::int64_t i = 0;
              for (; i + 16 <= inner; i += 16) std::memcpy(dst + i, src + i, 64);
              for (; i < inner; ++i) dst[i] = src[i];
            } else {
              for (std::int64_t i = 0; i < inner; ++i) dst[i] = src[i * istride];
            }
            for (int d = r - 2; d >= 0; --d) {  // the next row's multi-index and offset
              off += far[std::size_t(d)];
              if (++idx[std::size_t(d)] < dims[std::size_t(d)]) break;
              off -= dims[std::size_t(d)] * far[std::size_t(d)];
              idx[std::size_t(d)] = 0;
            }
          }
        });
      };
      // Output order, unless the last axis stays last and the input's last outer axis is
      // farther apart in the output than the output's is in the input.
      if (istride == 1 && r >= 2) {
        Shape ost = strides_of(os), far_out(static_cast<std::size_t>(r));  // output stride of input axis j
        for (int i = 0; i < r; ++i) far_out[std::size_t(p[std::size_t(i)])] = ost[std::size_t(i)];
        if (far_out[std::size_t(r - 2)] > st[std::size_t(r - 2)]) return walk(xs, far_out, false);
      }
      walk(os, st, true);
    },
    [](GradArgs& a) {
      const Shape& p = a.n().attrs.dims;
      Shape inv(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) inv[std::size_t(p[i])] = std::int64_t(i);
      a.gin[0] = op::permute(a.g, a.gout, inv);
    },
    [](const Graph&, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
      for (std::size_t d = 0; d < n.shape.size(); ++d) out.constant[d] = in[0]->constant[std::size_t(n.attrs.dims[d])];
    },
    [](const F64Args& a) {
      const Shape& p = a.n.attrs.dims;
      const Shape xs = strides_of(a.in(0).shape);
      std::vector<std::int64_t> st(p.size());
      for (std::size_t d = 0; d < p.size(); ++d) st[d] = xs[std::size_t(p[d])];
      for (std::int64_t i = 0; i < std::int64_t(a.out.v.size()); ++i)
        a.out.v[std::size_t(i)] = a.in(0).v[std::size_t(f64::source_index(a.out.shape, st, i))];
    },
    nullptr,
    // permute(permute(x, p), q) = permute(x, p[q[i]]); the identity permutation is x
    [](const Graph& t, const Node&, std::vector<NodeId>& ins, Attrs& attrs) -> NodeId {
      while (t.node(ins[0]).op == OpKind::permute && !t.node(ins[0]).attrs.no_grad) {
        const Shape& p = t.node(ins[0]).attrs.dims;
        Shape r(attrs.dims.size());
        for (std::size_t i = 0; i < r.size(); ++i) r[i] = p[std::size_t(attrs.dims[i])];
        attrs.dims = r;
        ins[0] = t.node(ins[0]).inputs[0];
      }
      return is_identity_perm(attrs.dims) ? ins[0] : -1;
    },
    [](const Node& n) { return fmt::format("perm={}", to_string(n.attrs.dims)); }};

// ---- expand ------------------------------------------------------------------------
// d/dx expand(x) = g summed over the broadcast axes (done by the reverse pass)
const OpRule expand_rule = {
    OpClass::movement,
    [](const Graph& g, Node& n) {
      const Node& x = g.node(n.inputs[0]);
      const Shape& t = n.attrs.dims;
      bool ok = t.size() >= x.shape.size();
      int bad = 0;
      for (std::size_t i = 0; ok && i < x.shape.size(); ++i) {
        std::int64_t xd = x.shape[x.shape.size() - 1 - i], td = t[t.size() - 1 - i];
        if (xd != td && xd != 1) {
          ok = false;
          bad = -int(i) - 1;
        }
      }
      if (!ok)
        g.fail(n, fmt::format("cannot expand {} to {}{}", describe(g, n.inputs[0]), to_string(t),
                              bad ? fmt::format(": dim {}", bad) : std::string(": target has fewer dims")));
      n.shape = t;
      n.dtype = x.dtype;
    },
    [](const KernelArgs& a) {
      const std::uint32_t* x = static_cast<const std::uint32_t*>(a.in[0].data);
      std::uint32_t* o = static_cast<std::uint32_t*>(a.out.data);
      detail::broadcast_rows<1>(*a.out.shape, {a.in[0].shape},
                                [&](std::int64_t oo, const std::array<std::int64_t, 1>& off, std::int64_t n,
                                    const std::array<std::int64_t, 1>& in) {
        if (in[0]) std::memcpy(o + oo, x + off[0], std::size_t(n) * 4);
        else std::fill(o + oo, o + oo + n, x[off[0]]);
      });
    },
    [](GradArgs& a) { a.gin[0] = a.gout; },
    tangent_aligned,
    expand_f64,
    nullptr,
    identity_collapse};

// ---- slice -------------------------------------------------------------------------
// d/dx x[begin:end] = g placed between zeros along the axis
const OpRule slice_rule = {
    OpClass::movement,
    [](const Graph& g, Node& n) {
      const Node& x = g.node(n.inputs[0]);
      auto& at = n.attrs;
      at.axis = detail::norm_axis(g, n, at.axis, std::int64_t(x.shape.size()), n.inputs[0]);
      const std::int64_t dim = x.shape[std::size_t(at.axis)];
      if (at.begin < 0) at.begin += dim;
      if (at.end < 0) at.end += dim;
      if (at.begin < 0 || at.end > dim || at.begin > at.end)
        g.fail(n, fmt::format("range [{}, {}) outside axis {} of size {} in {}", at.begin, at.end, at.axis, dim,
                              describe(g, n.inputs[0])));
      n.shape = x.shape;
      n.shape[std::size_t(at.axis)] = at.end - at.begin;
      n.dtype = x.dtype;
    },
    [](const KernelArgs& a) {
      auto sp = detail::split_at(*a.in[0].shape, a.node.attrs.axis);
      const std::int64_t len = a.node.attrs.end - a.node.attrs.begin;
      const std::uint32_t* x = static_cast<const std::uint32_t*>(a.in[0].data);
      std::uint32_t* o = static_cast<std::uint32_t*>(a.out.data);
      for (std::int64_t i = 0; i < sp.outer; ++i)
        std::memcpy(o + i * len * sp.inner, x + (i * sp.n + a.node.attrs.begin) * sp.inner,
                    std::size_t(len * sp.inner) * 4);
    },
    [](GradArgs& a) {
      const Node& n = a.n();
      const Shape& xs = a.g.node(a.in(0)).shape;
      std::vector<NodeId> parts;
      auto zeros = [&](std::int64_t len) {
        Shape s = xs;
        s[std::size_t(n.attrs.axis)] = len;
        return op::expand(a.g, op::scalar(a.g, 0.f), s);
      };
      if (n.attrs.begin > 0) parts.push_back(zeros(n.attrs.begin));
      parts.push_back(a.gout);
      if (n.attrs.end < xs[std::size_t(n.attrs.axis)]) parts.push_back(zeros(xs[std::size_t(n.attrs.axis)] - n.attrs.end));
      a.gin[0] = parts.size() == 1 ? a.gout : op::concat(a.g, parts, n.attrs.axis);
    },
    tangent_aligned,
    [](const F64Args& a) {
      const f64::Split3 s = f64::split_at(a.in(0).shape, a.n.attrs.axis);
      const std::int64_t b = a.n.attrs.begin, len = a.n.attrs.end - b;
      for (std::int64_t i = 0; i < s.outer; ++i)
        for (std::int64_t j = 0; j < len; ++j)
          for (std::int64_t c = 0; c < s.inner; ++c)
            a.out.v[std::size_t((i * len + j) * s.inner + c)] = a.in(0).v[std::size_t((i * s.n + b + j) * s.inner + c)];
    },
    nullptr,
    identity_same_shape,  // the whole axis
    [](const Node& n) { return fmt::format("axis={}, {}:{}", n.attrs.axis, n.attrs.begin, n.attrs.end); }};

// ---- concat ------------------------------------------------------------------------
// d/dx_i concat(x_0, x_1, ...) = the slice of g that x_i occupies
const OpRule concat_rule = {
    OpClass::movement,
    [](const Graph& g, Node& n) {
      if (n.inputs.empty()) g.fail(n, "needs at least one input");
      const Node& x0 = g.node(n.inputs[0]);
      n.attrs.axis = detail::norm_axis(g, n, n.attrs.axis, std::int64_t(x0.shape.size()), n.inputs[0]);
      n.shape = x0.shape;
      n.shape[std::size_t(n.attrs.axis)] = 0;
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        const Node& xi = g.node(n.inputs[i]);
        if (xi.dtype != x0.dtype)
          g.fail(n, fmt::format("input {} is {}, input 0 is {}", i, to_string(xi.dtype), to_string(x0.dtype)));
        bool ok = xi.shape.size() == x0.shape.size();
        std::size_t bad = 0;
        for (std::size_t d = 0; ok && d < x0.shape.size(); ++d)
          if (std::int64_t(d) != n.attrs.axis && xi.shape[d] != x0.shape[d]) {
            ok = false;
            bad = d;
          }
        if (!ok)
          g.fail(n, fmt::format("input {} {} does not match input 0 {} outside axis {}{}", i, describe(g, n.inputs[i]),
                                describe(g, n.inputs[0]), n.attrs.axis,
                                xi.shape.size() == x0.shape.size()
                                    ? fmt::format(": dim {}: {} vs {}", bad, xi.shape[bad], x0.shape[bad])
                                    : std::string(": ranks differ")));
        n.shape[std::size_t(n.attrs.axis)] += xi.shape[std::size_t(n.attrs.axis)];
      }
      n.dtype = x0.dtype;
    },
    [](const KernelArgs& a) {
      auto so = detail::split_at(*a.out.shape, a.node.attrs.axis);
      std::uint32_t* o = static_cast<std::uint32_t*>(a.out.data);
      std::int64_t at = 0;  // offset along the axis
      for (const View& v : a.in) {
        const std::int64_t len = (*v.shape)[std::size_t(a.node.attrs.axis)];
        const std::uint32_t* x = static_cast<const std::uint32_t*>(v.data);
        for (std::int64_t i = 0; i < so.outer; ++i)
          std::memcpy(o + (i * so.n + at) * so.inner, x + i * len * so.inner, std::size_t(len * so.inner) * 4);
        at += len;
      }
    },
    [](GradArgs& a) {
      const Node& n = a.n();
      std::int64_t at = 0;
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        std::int64_t len = a.g.node(n.inputs[i]).shape[std::size_t(n.attrs.axis)];
        if (a.needs[i]) a.gin[i] = op::slice(a.g, a.gout, n.attrs.axis, at, at + len);
        at += len;
      }
    },
    // Constant along the axes every input is, never along the joined one.
    [](const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
      tangent_additive(g, n, in, out);
      out.constant[std::size_t(n.attrs.axis)] = 0;
    },
    [](const F64Args& a) {
      const f64::Split3 so = f64::split_at(a.out.shape, a.n.attrs.axis);
      std::int64_t at = 0;
      for (std::size_t k = 0; k < a.inputs.size(); ++k) {
        const std::int64_t len = a.in(k).shape[std::size_t(a.n.attrs.axis)];
        for (std::int64_t i = 0; i < so.outer; ++i)
          for (std::int64_t j = 0; j < len; ++j)
            for (std::int64_t c = 0; c < so.inner; ++c)
              a.out.v[std::size_t((i * so.n + at + j) * so.inner + c)] = a.in(k).v[std::size_t((i * len + j) * so.inner + c)];
        at += len;
      }
    },
    nullptr,
    [](const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs&) {
      return ins.size() == 1 ? same_value_as(t, n, ins[0]) : NodeId(-1);
    },
    [](const Node& n) { return fmt::format("axis={}", n.attrs.axis); }};

}  // namespace gg
