// The reference interpreter: a switch over the primitives, each a plain scalar loop in
// double. Broadcasting goes through one helper (an input's strides aligned to the output,
// zero on broadcast dims); reductions view a tensor as (outer, n, inner) around the axis.
#include "ops/eval_f64.h"

#include <fmt/format.h>

#include <cmath>

namespace gg {
namespace {

// Strides of `in` aligned to the rank of `out`, 0 on broadcast (size-1 or missing) dims.
std::vector<std::int64_t> aligned_strides(const Shape& out, const Shape& in) {
  std::vector<std::int64_t> st(out.size(), 0);
  const Shape is = strides_of(in);
  const std::size_t off = out.size() - in.size();
  for (std::size_t d = 0; d < in.size(); ++d) st[off + d] = in[d] == 1 ? 0 : is[d];
  return st;
}

// The flat index into an input with aligned strides `st` of output element `o`.
std::int64_t source_index(const Shape& out, const std::vector<std::int64_t>& st, std::int64_t o) {
  std::int64_t idx = 0;
  for (std::size_t d = out.size(); d-- > 0;) {
    idx += (o % out[d]) * st[d];
    o /= out[d];
  }
  return idx;
}

struct Split3 {
  std::int64_t outer = 1, n = 1, inner = 1;
};
Split3 split_at(const Shape& s, std::int64_t axis) {
  Split3 r;
  r.n = s[std::size_t(axis)];
  for (std::int64_t i = 0; i < axis; ++i) r.outer *= s[std::size_t(i)];
  for (std::size_t i = std::size_t(axis) + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

bool compare(Cmp c, double u, double v) {
  switch (c) {
    case Cmp::lt: return u < v;
    case Cmp::le: return u <= v;
    case Cmp::gt: return u > v;
    case Cmp::ge: return u >= v;
    case Cmp::eq: return u == v;
    case Cmp::ne: return u != v;
  }
  return false;
}

// One node's value from its inputs' values.
F64Value eval_node(const Graph& g, NodeId id, const std::vector<F64Value>& val, const F64Leaves& leaves) {
  const Node& n = g.node(id);
  F64Value out{n.shape, n.dtype, std::vector<double>(std::size_t(numel(n.shape)), 0.0)};
  std::vector<double>& o = out.v;
  auto in = [&](std::size_t i) -> const F64Value& { return val[std::size_t(n.inputs[i])]; };
  const std::int64_t N = numel(n.shape);

  // Element-wise with broadcasting: o[i] = f(a[.], b[.]).
  auto binary = [&](auto f) {
    auto sa = aligned_strides(n.shape, in(0).shape), sb = aligned_strides(n.shape, in(1).shape);
    for (std::int64_t i = 0; i < N; ++i)
      o[std::size_t(i)] = f(in(0).v[std::size_t(source_index(n.shape, sa, i))],
                            in(1).v[std::size_t(source_index(n.shape, sb, i))]);
  };
  auto unary = [&](auto f) {
    for (std::int64_t i = 0; i < N; ++i) o[std::size_t(i)] = f(in(0).v[std::size_t(i)]);
  };
  auto leaf = [&](const char* what) {
    auto it = leaves.find(n.name);
    if (it == leaves.end()) g.fail(n, fmt::format("eval_f64: no value for {} '{}'", what, n.name));
    if (it->second.shape != n.shape || it->second.dtype != n.dtype || it->second.v.size() != o.size())
      g.fail(n, fmt::format("eval_f64: {} '{}' is {}{} in the graph but {}{} ({} values) was given", what, n.name,
                            to_string(n.dtype), to_string(n.shape), to_string(it->second.dtype),
                            to_string(it->second.shape), it->second.v.size()));
    o = it->second.v;
  };
  auto check_index = [&](double idx, std::int64_t size, std::int64_t pos) {
    if (idx < 0 || idx >= double(size))
      g.fail(n, fmt::format("index {} at position {} is out of range [0, {})", idx, pos, size));
  };

  switch (n.op) {
    case OpKind::input: leaf("input"); break;
    case OpKind::param: leaf("parameter"); break;
    case OpKind::constant:
      for (std::size_t i = 0; i < o.size(); ++i) o[i] = double((*n.attrs.data)[i]);
      break;
    case OpKind::random:
      g.fail(n, "eval_f64 refuses random nodes: their noise is drawn by the executor's generator, so an f64 "
                "run could not reproduce it (build the graph with dropout off)");
    case OpKind::add: binary([](double a, double b) { return a + b; }); break;
    case OpKind::sub: binary([](double a, double b) { return a - b; }); break;
    case OpKind::mul: binary([](double a, double b) { return a * b; }); break;
    case OpKind::div: binary([](double a, double b) { return a / b; }); break;
    case OpKind::maximum: binary([](double a, double b) { return a < b ? b : a; }); break;
    case OpKind::neg: unary([](double x) { return -x; }); break;
    case OpKind::exp: unary([](double x) { return std::exp(x); }); break;
    case OpKind::log: unary([](double x) { return std::log(x); }); break;
    case OpKind::sqrt: unary([](double x) { return std::sqrt(x); }); break;
    case OpKind::tanh: unary([](double x) { return std::tanh(x); }); break;
    case OpKind::erf: unary([](double x) { return std::erf(x); }); break;
    case OpKind::compare: {
      const Cmp c = n.attrs.cmp;
      binary([c](double a, double b) { return compare(c, a, b) ? 1.0 : 0.0; });
      break;
    }
    case OpKind::where: {
      auto sc = aligned_strides(n.shape, in(0).shape), sa = aligned_strides(n.shape, in(1).shape),
           sb = aligned_strides(n.shape, in(2).shape);
      for (std::int64_t i = 0; i < N; ++i)
        o[std::size_t(i)] = in(0).v[std::size_t(source_index(n.shape, sc, i))] != 0.0
                                ? in(1).v[std::size_t(source_index(n.shape, sa, i))]
                                : in(2).v[std::size_t(source_index(n.shape, sb, i))];
      break;
    }
    case OpKind::sum:
    case OpKind::max:
    case OpKind::argmax: {
      const Split3 s = split_at(in(0).shape, n.attrs.axis);  // x: (outer, n, inner) -> out: (outer, inner)
      const std::vector<double>& x = in(0).v;
      for (std::int64_t a = 0; a < s.outer; ++a)
        for (std::int64_t c = 0; c < s.inner; ++c) {
          auto at = [&](std::int64_t j) { return x[std::size_t((a * s.n + j) * s.inner + c)]; };
          double r = at(0);
          std::int64_t best = 0;
          for (std::int64_t j = 1; j < s.n; ++j) {
            const double v = at(j);
            if (n.op == OpKind::sum) r += v;
            else if (n.op == OpKind::max) r = std::isnan(r) || std::isnan(v) ? NAN : std::max(r, v);
            else if (!std::isnan(r) && (v > r || std::isnan(v))) {  // argmax: first on ties, NaN is largest
              r = v;
              best = j;
            }
          }
          o[std::size_t(a * s.inner + c)] = n.op == OpKind::argmax ? double(best) : r;
        }
      break;
    }
    case OpKind::matmul: {
      const Shape& sa = in(0).shape;
      const Shape& sb = in(1).shape;
      const bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
      const std::int64_t M = n.shape[n.shape.size() - 2], Nn = n.shape.back();
      const std::int64_t K = ta ? sa[sa.size() - 2] : sa.back();
      const Shape batch(n.shape.begin(), n.shape.end() - 2);
      auto stA = aligned_strides(batch, Shape(sa.begin(), sa.end() - 2));
      auto stB = aligned_strides(batch, Shape(sb.begin(), sb.end() - 2));
      const std::int64_t matA = sa.back() * sa[sa.size() - 2], matB = sb.back() * sb[sb.size() - 2];
      const std::int64_t lda = sa.back(), ldb = sb.back();
      for (std::int64_t b = 0; b < numel(batch); ++b) {
        const double* A = in(0).v.data() + source_index(batch, stA, b) * matA;
        const double* B = in(1).v.data() + source_index(batch, stB, b) * matB;
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < Nn; ++j) {
            double acc = 0;
            for (std::int64_t k = 0; k < K; ++k)
              acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            o[std::size_t((b * M + i) * Nn + j)] = acc;
          }
      }
      break;
    }
    case OpKind::reshape: o = in(0).v; break;
    case OpKind::permute: {
      const Shape& p = n.attrs.dims;
      const Shape xs = strides_of(in(0).shape);
      std::vector<std::int64_t> st(p.size());
      for (std::size_t d = 0; d < p.size(); ++d) st[d] = xs[std::size_t(p[d])];
      for (std::int64_t i = 0; i < N; ++i) o[std::size_t(i)] = in(0).v[std::size_t(source_index(n.shape, st, i))];
      break;
    }
    case OpKind::expand: {
      auto st = aligned_strides(n.shape, in(0).shape);
      for (std::int64_t i = 0; i < N; ++i) o[std::size_t(i)] = in(0).v[std::size_t(source_index(n.shape, st, i))];
      break;
    }
    case OpKind::slice: {
      const Split3 s = split_at(in(0).shape, n.attrs.axis);
      const std::int64_t len = n.attrs.end - n.attrs.begin;
      for (std::int64_t a = 0; a < s.outer; ++a)
        for (std::int64_t j = 0; j < len; ++j)
          for (std::int64_t c = 0; c < s.inner; ++c)
            o[std::size_t((a * len + j) * s.inner + c)] = in(0).v[std::size_t((a * s.n + n.attrs.begin + j) * s.inner + c)];
      break;
    }
    case OpKind::concat: {
      const Split3 so = split_at(n.shape, n.attrs.axis);
      std::int64_t at = 0;
      for (std::size_t k = 0; k < n.inputs.size(); ++k) {
        const std::int64_t len = in(k).shape[std::size_t(n.attrs.axis)];
        for (std::int64_t a = 0; a < so.outer; ++a)
          for (std::int64_t j = 0; j < len; ++j)
            for (std::int64_t c = 0; c < so.inner; ++c)
              o[std::size_t((a * so.n + at + j) * so.inner + c)] = in(k).v[std::size_t((a * len + j) * so.inner + c)];
        at += len;
      }
      break;
    }
    case OpKind::gather: {
      const Split3 s = split_at(in(0).shape, n.attrs.axis);  // x: (outer, n, inner)
      const std::vector<double>& idx = in(1).v;              // index: (count)
      const std::int64_t count = std::int64_t(idx.size());
      for (std::int64_t c = 0; c < count; ++c) check_index(idx[std::size_t(c)], s.n, c);
      for (std::int64_t a = 0; a < s.outer; ++a)
        for (std::int64_t c = 0; c < count; ++c)
          for (std::int64_t k = 0; k < s.inner; ++k)
            o[std::size_t((a * count + c) * s.inner + k)] =
                in(0).v[std::size_t((a * s.n + std::int64_t(idx[std::size_t(c)])) * s.inner + k)];
      break;
    }
    case OpKind::scatter_add: {
      const Split3 so = split_at(n.shape, n.attrs.axis);  // out: (outer, size, inner)
      const std::vector<double>& idx = in(1).v;
      const std::int64_t count = std::int64_t(idx.size());
      for (std::int64_t c = 0; c < count; ++c) check_index(idx[std::size_t(c)], so.n, c);
      for (std::int64_t a = 0; a < so.outer; ++a)
        for (std::int64_t c = 0; c < count; ++c)
          for (std::int64_t k = 0; k < so.inner; ++k)
            o[std::size_t((a * so.n + std::int64_t(idx[std::size_t(c)])) * so.inner + k)] +=
                in(0).v[std::size_t((a * count + c) * so.inner + k)];
      break;
    }
  }
  return out;
}

}  // namespace

F64Value to_f64(const Tensor& t) {
  F64Value v{t.shape(), t.dtype(), std::vector<double>(std::size_t(t.numel()))};
  for (std::int64_t i = 0; i < t.numel(); ++i)
    v.v[std::size_t(i)] = t.dtype() == DType::i32 ? double(t.i()[i]) : double(t.f()[i]);
  return v;
}

F64Leaves f64_leaves(const ParamStore& store, const std::map<std::string, Tensor>& inputs) {
  F64Leaves l;
  for (const auto& [name, t] : store.all()) l[name] = to_f64(t);
  for (const auto& [name, t] : inputs) l[name] = to_f64(t);
  return l;
}

std::vector<F64Value> eval_f64(const Graph& g, const std::vector<NodeId>& outputs, const F64Leaves& leaves) {
  for (NodeId o : outputs)
    if (o < 0 || o >= g.size())
      throw GraphError(fmt::format("eval_f64: output %{} is not a node of this graph (it has {} nodes)", o, g.size()));
  std::vector<F64Value> val(std::size_t(g.size()));
  for (NodeId id : ancestors(g, outputs)) val[std::size_t(id)] = eval_node(g, id, val, leaves);
  std::vector<F64Value> out;
  for (NodeId o : outputs) out.push_back(val[std::size_t(o)]);
  return out;
}

}  // namespace gg
