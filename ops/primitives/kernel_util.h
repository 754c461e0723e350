// Helpers shared by the op family files (internal to ops/): broadcasting row iteration
// and small formatting helpers for shape errors. Not part of the public API.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>

#include "../ir/build.h"
#include "../ir/eval_f64.h"
#include "../ir/op_rule.h"
#include "../cpu/parallel.h"
#include "../ir/tangent.h"

namespace gg::detail {

// "(2, 4, 8) ('x')": a node's shape with its name, for error messages.
inline std::string describe(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.name.empty()) return to_string(n.shape);
  return fmt::format("{} ('{}')", to_string(n.shape), n.name);
}

// Checks input i of n has dtype t.
inline void require_dtype(const Graph& g, const Node& n, int i, DType t, const char* role) {
  const Node& x = g.node(n.inputs[std::size_t(i)]);
  if (x.dtype != t)
    g.fail(n, fmt::format("{} must be {}, got {} {}", role, to_string(t), to_string(x.dtype),
                          describe(g, n.inputs[std::size_t(i)])));
}

// Normalizes a possibly negative axis into [0, rank) or fails naming the axis.
inline std::int64_t norm_axis(const Graph& g, const Node& n, std::int64_t axis, std::int64_t rank,
                              NodeId of) {
  if (axis < -rank || axis >= rank)
    g.fail(n, fmt::format("axis {} out of range for {} of rank {}", axis, describe(g, of), rank));
  return axis < 0 ? axis + rank : axis;
}

// Splits `shape` around `axis` into (outer, n, inner) element counts.
struct Split3 {
  std::int64_t outer, n, inner;
};
inline Split3 split_at(const Shape& s, std::int64_t axis) {
  Split3 r{1, s[std::size_t(axis)], 1};
  for (std::int64_t i = 0; i < axis; ++i) r.outer *= s[std::size_t(i)];
  for (std::size_t i = std::size_t(axis) + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

// Iterates over the output of a broadcasting op with N inputs, one contiguous run of the
// innermost (collapsed) dimension at a time, possibly in parallel:
//   row(out_offset, in_offsets[N], n, in_inner_stride[N])   with inner strides 0 or 1.
template <int N, class Row>
void broadcast_rows(const Shape& out, const std::array<const Shape*, N>& ins, Row row) {
  const int r = int(out.size());
  // Strides of each input aligned to the output's rank (0 on broadcast dims).
  std::vector<std::array<std::int64_t, N>> st(static_cast<std::size_t>(r));
  for (int k = 0; k < N; ++k) {
    const Shape& s = *ins[std::size_t(k)];
    std::int64_t acc = 1;
    for (int d = r - 1; d >= 0; --d) {
      int sd = d - (r - int(s.size()));
      std::int64_t dim = sd >= 0 ? s[std::size_t(sd)] : 1;
      st[std::size_t(d)][std::size_t(k)] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  // Collapse adjacent dims that every tensor walks contiguously.
  std::vector<std::int64_t> dims;
  std::vector<std::array<std::int64_t, N>> cst;
  for (int d = 0; d < r; ++d) {
    if (out[std::size_t(d)] == 1) continue;
    if (!dims.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k)
        if (cst.back()[std::size_t(k)] != st[std::size_t(d)][std::size_t(k)] * out[std::size_t(d)]) merge = false;
      if (merge) {
        dims.back() *= out[std::size_t(d)];
        cst.back() = st[std::size_t(d)];
        continue;
      }
    }
    dims.push_back(out[std::size_t(d)]);
    cst.push_back(st[std::size_t(d)]);
  }
  if (dims.empty()) {  // a scalar output
    dims.push_back(1);
    cst.push_back({});
  }
  const int cr = int(dims.size());
  const std::int64_t n = dims.back();
  std::array<std::int64_t, N> inner;
  for (int k = 0; k < N; ++k) inner[std::size_t(k)] = cst.back()[std::size_t(k)] ? 1 : 0;
  std::int64_t rows = 1;
  for (int d = 0; d < cr - 1; ++d) rows *= dims[std::size_t(d)];
  if (rows == 1) {
    // One long run (same shapes, or against a scalar): split it in pieces of whole
    // SIMD registers, so threads share it and every element takes the same code path.
    parallel_for((n + 63) / 64, 256, [&](std::int64_t c0, std::int64_t c1) {
      const std::int64_t b = c0 * 64, e = std::min(n, c1 * 64);
      std::array<std::int64_t, N> off;
      for (int k = 0; k < N; ++k) off[std::size_t(k)] = b * inner[std::size_t(k)];
      row(b, off, e - b, inner);
    });
    return;
  }
  parallel_for(rows, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t r0, std::int64_t r1) {
    // Multi-index of row r0 over the outer dims, then step through rows.
    std::vector<std::int64_t> idx(std::size_t(std::max(cr - 1, 0)), 0);
    std::array<std::int64_t, N> off{};
    std::int64_t rem = r0;
    for (int d = cr - 2; d >= 0; --d) {
      idx[std::size_t(d)] = rem % dims[std::size_t(d)];
      rem /= dims[std::size_t(d)];
      for (int k = 0; k < N; ++k) off[std::size_t(k)] += idx[std::size_t(d)] * cst[std::size_t(d)][std::size_t(k)];
    }
    for (std::int64_t rr = r0; rr < r1; ++rr) {
      row(rr * n, off, n, inner);
      for (int d = cr - 2; d >= 0; --d) {  // odometer increment
        for (int k = 0; k < N; ++k) off[std::size_t(k)] += cst[std::size_t(d)][std::size_t(k)];
        if (++idx[std::size_t(d)] < dims[std::size_t(d)]) break;
        for (int k = 0; k < N; ++k) off[std::size_t(k)] -= dims[std::size_t(d)] * cst[std::size_t(d)][std::size_t(k)];
        idx[std::size_t(d)] = 0;
      }
    }
  });
}

}  // namespace gg::detail
