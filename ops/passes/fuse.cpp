// Grouping element-wise chains, row reductions and broadcasts, and running a group.
//
// Grouping walks the planned order backwards (readers first): a fusible node that is not
// kept joins the group of one of its readers when its shape fits that group's row space and
// every reader outside the group comes after the group's root (then it is a stored member);
// otherwise it starts a group of its own, as its root.
//
// A flat group walks its output in whole SIMD registers (as the unary kernels do), in
// tiles (buffer_values), each member writing one tile-sized buffer on the stack. A row
// group walks blocks of whole rows; each member writes the block's rows into a per-thread
// buffer (n values a row, or 1 if reduced). Stored members and the root write their own
// buffers instead, where later members read them. A block starts on a register boundary of
// every transcendental member's flat values, so a unary member run over the block splits
// into SIMD body and scalar tail exactly as its kernel does. A group whose program
// ops/passes/fused_programs.inc lists runs compiled instead, every member's value in a register
// (ops/passes/fuse_compiled.h).
#include "ops/passes/fuse.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>

#include "ops/primitives/elementwise_fn.h"
#include "ops/passes/fuse_compiled.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd.h"

namespace gg {
namespace {

// Values per member buffer. Each member is one pass over its buffer, so a pass's set-up
// (the op's dispatch, the broadcast checks, the SIMD loop's tail) is paid once per buffer:
// larger buffers pay it less often (flat tiles of 2048 instead of 512 measured faster on a
// chain of binary ops). But the buffers a group writes and reads back (its members that are
// not stored) must stay in L1 together: GELU's forward group, with buffers that together
// outgrew L1, ran markedly slower than with smaller ones, every store missing L1. So a
// group's buffers share `l1_budget` floats, within [min_buffer, max_buffer] values each.
constexpr std::int64_t l1_budget = 8192;  // 32 KB: the smallest L1 of the x86 cores measured
constexpr std::int64_t min_buffer = 512, max_buffer = 4096;
constexpr std::int64_t tile = 2048;  // a flat group's largest tile (its buffers are on the stack)

// Values per buffer for a group with `scratch` members that are not stored, a multiple of
// `unit` (at least one unit).
std::int64_t buffer_values(std::size_t scratch, std::int64_t unit) {
  const std::int64_t v = std::clamp(l1_budget / std::max<std::int64_t>(1, std::int64_t(scratch)), min_buffer, max_buffer);
  return std::max<std::int64_t>(1, v / unit) * unit;
}


// A flat member: an element-wise f32 node of more than one value whose operands are all of
// its shape or of one value.
bool flat_fusible(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (!op_arithmetic(n.op) || n.dtype != DType::f32 || numel(n.shape) <= 1) return false;
  for (NodeId in : n.inputs) {
    const Node& x = g.node(in);
    if (x.dtype != DType::f32 || (x.shape != n.shape && numel(x.shape) != 1)) return false;
  }
  return true;
}

// Where a node sits in a row space: its lead dims and the row length it needs (-1: any,
// a reduced node (lead..., 1) fits a row space of any n).
struct Fit {
  bool ok = false;
  Shape lead;
  std::int64_t n = -1;
};
Fit row_fit(const Graph& g, NodeId id) {
  const Node& nd = g.node(id);
  Fit f;
  if (nd.dtype != DType::f32 || nd.shape.empty() || numel(nd.shape) <= 1) return f;
  for (NodeId in : nd.inputs)
    if (g.node(in).dtype != DType::f32) return f;
  const std::int64_t last = nd.shape.back();
  f.lead.assign(nd.shape.begin(), nd.shape.end() - 1);
  const OpClass cls = op_class(nd.op);
  if (cls == OpClass::reduction) {  // sum, max over the last axis, keepdim: (lead..., n) -> (lead..., 1)
    if (!nd.attrs.keepdim || nd.attrs.axis != std::int64_t(nd.shape.size()) - 1) return f;
    f.n = g.node(nd.inputs[0]).shape.back();
  } else if (op_elementwise(nd.op) || nd.op == OpKind::expand) {
    f.n = last == 1 ? -1 : last;
  } else {
    return f;
  }
  f.ok = f.n <= max_fused_row;
  return f;
}

struct Building {
  std::vector<NodeId> members;  // readers first
  Shape shape;                  // flat groups (n > max_fused_row): the one shape
  Shape lead;
  std::int64_t n = -1;          // -1: only reduced members so far
  bool flat_only = false;       // rows too long for a row group: flat members only
};

// Reads input `shape` in the row space (lead..., n).
FusedRead read_of(const Shape& shape, const Shape& lead, std::int64_t n) {
  FusedRead r;
  const std::size_t lr = lead.size(), rank = lr + 1;
  auto dim = [&](std::size_t d) {  // shape's dim aligned to row-space dim d, 1 if absent
    const std::ptrdiff_t sd = std::ptrdiff_t(d) - std::ptrdiff_t(rank - shape.size());
    return sd >= 0 ? shape[std::size_t(sd)] : 1;
  };
  const std::int64_t last = dim(lr);
  r.inner = last == n && n != 1 ? 1 : 0;
  std::int64_t acc = last;
  r.lead_stride.assign(lr, 0);
  for (std::size_t d = lr; d-- > 0;) {
    r.lead_stride[d] = dim(d) == 1 ? 0 : acc;
    acc *= dim(d);
  }
  // Whole rows in order (a row stride of `last` over every lead dim), or one row for all.
  bool rows_in_order = true, one_row = true;
  std::int64_t natural = last;
  for (std::size_t d = lr; d-- > 0;) {
    if (lead[d] == 1) continue;  // index 0 only: its stride never counts
    rows_in_order = rows_in_order && r.lead_stride[d] == natural;
    one_row = one_row && r.lead_stride[d] == 0;
    natural *= lead[d];
  }
  r.step = one_row ? 0 : rows_in_order ? last : -1;
  return r;
}

struct Operand {
  const float* p;
  bool one;  // a single value, broadcast
};

template <class F>
void run_binary(F f, std::int64_t len, float* dst, Operand x, Operand y) {
  if (x.one && y.one) std::fill(dst, dst + len, f(*x.p, *y.p));
  else if (x.one) simd::zip_scalar_left(std::size_t(len), dst, *x.p, y.p, f);
  else if (y.one) simd::zip_scalar_right(std::size_t(len), dst, x.p, *y.p, f);
  else simd::zip(std::size_t(len), dst, x.p, y.p, f);
}

// Element-wise member over len values (a tile, a row, or for unary ops a block of rows),
// by its record's element function.
void run_instr(OpKind op, std::int64_t len, float* dst, Operand x, Operand y) {
  const ElementFns& f = *op_rule(op).elem;
  const std::size_t n = std::size_t(len);
  if (f.map) return f.map(n, dst, x.p);
  if (x.one && y.one) std::fill(dst, dst + len, f.scalar(*x.p, *y.p));
  else if (x.one) f.zip_left(n, dst, *x.p, y.p);
  else if (y.one) f.zip_right(n, dst, x.p, *y.p);
  else f.zip(n, dst, x.p, y.p);
}

// d = [x cmp y] over one row: 1 or 0, as compare's kernel (the same fn::compare, in
// registers).
void compare_row(Cmp c, std::int64_t len, float* d, Operand x, Operand y) {
  switch (c) {
    case Cmp::lt: return run_binary(fn::compare<0>{}, len, d, x, y);
    case Cmp::le: return run_binary(fn::compare<1>{}, len, d, x, y);
    case Cmp::gt: return run_binary(fn::compare<2>{}, len, d, x, y);
    case Cmp::ge: return run_binary(fn::compare<3>{}, len, d, x, y);
    case Cmp::eq: return run_binary(fn::compare<4>{}, len, d, x, y);
    case Cmp::ne: return run_binary(fn::compare<5>{}, len, d, x, y);
  }
}

// d = c != 0 ? x : y over one row, as where's kernel: a selection in registers (a
// branch per value here mispredicted on every causal mask row).
void where_row(std::int64_t len, float* d, Operand c, Operand x, Operand y) {
  simd::zip3(std::size_t(len), d, c.p, c.one ? 0 : 1, x.p, x.one ? 0 : 1, y.p, y.one ? 0 : 1, fn::where{});
}

// Per member: where its whole value goes, if stored (the root's output, a stored member's
// buffer), else nullptr (a scratch buffer).
std::vector<float*> member_outputs(const FusedGroup& group, View out, std::span<const View> stored) {
  std::vector<float*> dst(group.program.size(), nullptr);
  for (std::size_t k = 0, s = 0; k < group.program.size(); ++k)
    if (group.program[k].stored) dst[k] = stored[s++].f();
  dst.back() = out.f();
  return dst;
}

// Values [begin, end) of the group (begin on a register boundary).
void run_flat(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
              std::int64_t begin, std::int64_t end) {
  const std::int64_t n = end, w = std::int64_t(simd::width), first = begin / w;
  const std::size_t count = group.program.size();
  const std::vector<float*> whole = member_outputs(group, out, stored);
  // Chunks in whole registers, as unary_kernel: only the last value(s) take the scalar tail.
  // Member k's tile: its own buffer from t0 when stored, else slot[k] of the stack's.
  std::array<std::int64_t, max_fused_members> slot{};
  std::size_t scratch = 0;
  for (std::size_t k = 0; k < count; ++k)
    if (!whole[k]) slot[k] = std::int64_t(scratch++);
  const std::int64_t t = std::min(tile, buffer_values(scratch, w));
  parallel_for((n - begin + w - 1) / w, 8192 / w, [&](std::int64_t b, std::int64_t e) {
    alignas(64) float buf[max_fused_members * tile];
    const std::int64_t lo = (first + b) * w, hi = std::min(n, (first + e) * w);
    for (std::int64_t t0 = lo; t0 < hi; t0 += t) {
      const std::int64_t len = std::min(t, hi - t0);
      auto member = [&](std::size_t k) { return whole[k] ? whole[k] + t0 : buf + slot[k] * t; };
      auto operand = [&](int o) -> Operand {
        if (o >= 0) return {member(std::size_t(o)), false};
        const View& v = in[std::size_t(-o - 1)];
        return v.numel() == 1 ? Operand{v.f(), true} : Operand{v.f() + t0, false};
      };
      for (std::size_t k = 0; k < count; ++k) {
        const FusedInstr& ins = group.program[k];
        float* dst = member(k);
        const bool unary = op_arity(ins.op) == 1;
        run_instr(ins.op, len, dst, operand(ins.a), unary ? Operand{nullptr, false} : operand(ins.b));
      }
    }
  });
}

// An operand over the rows of a block: row i starts at base + roff[i], or base + i * step.
struct Rows {
  const float* base;
  const std::int64_t* roff;  // nullptr: rows at a fixed step
  std::int64_t step;
  bool one;  // one value per row, broadcast over it
  const float* row(std::int64_t i) const { return base + (roff ? roff[i] : i * step); }
  Operand at(std::int64_t i) const { return {row(i), one}; }
  // Whether the block's values for a member of `len` values a row are one run from base
  // (whole rows in order, or one value per row for a one-value-a-row member), or one value
  // throughout (`constant`): then the block runs as one row of nr * len values.
  bool flat(std::int64_t len, bool& constant) const {
    constant = !roff && one && step == 0;
    return constant || (!roff && ((!one && step == len) || (one && len == 1 && step == 1)));
  }
};

// Binary element-wise member over a block: one pass when every operand runs through the
// block in order, else row by row (the ops are exact: any split gives the kernel's bits).
void binary_member(OpKind op, std::int64_t nr, std::int64_t len, float* dst, const Rows& x, const Rows& y) {
  bool xc = false, yc = false;
  if (x.flat(len, xc) && y.flat(len, yc)) return run_instr(op, nr * len, dst, {x.base, xc}, {y.base, yc});
  for (std::int64_t i = 0; i < nr; ++i) run_instr(op, len, dst + i * len, x.at(i), y.at(i));
}

// How run_rows lays a group's rows out: rows per block, each thread's scratch (member k's
// block at off[k] unless it writes its own buffer, then the row offsets of the inputs read
// at no fixed step) and the row-index strides of the lead dims.
struct RowLayout {
  std::int64_t R = 1, blocks = 0;
  std::vector<std::size_t> off;
  std::vector<std::size_t> irregular;  // inputs read through row offsets
  std::size_t offs_at = 0, total = 0;
  std::vector<std::int64_t> natural;
};

RowLayout row_layout(const FusedGroup& group, const std::vector<float*>& whole, std::int64_t begin, std::int64_t rows) {
  const std::int64_t n = group.n, w = std::int64_t(simd::width);
  const std::size_t count = group.program.size();
  RowLayout L;
  // Rows per block: a multiple of `unit`, so that every block starts on a register boundary
  // of each transcendental member's flat values (row r of a full member starts at r * n,
  // of a reduced one at r).
  std::int64_t unit = 1;
  for (const FusedInstr& ins : group.program)
    if (transcendental(ins.op)) unit = std::lcm(unit, ins.reduced ? w : w / std::gcd(n, w));
  const auto scratch = std::size_t(std::count(whole.begin(), whole.end(), nullptr));
  L.R = unit * std::max<std::int64_t>(1, buffer_values(scratch, 1) / (unit * n));
  L.blocks = (rows - begin + L.R - 1) / L.R;
  L.off.assign(count, 0);
  for (std::size_t k = 0; k < count; ++k) {
    if (whole[k]) continue;
    L.off[k] = L.total;
    L.total += std::size_t((L.R * (group.program[k].reduced ? 1 : n) + 15) / 16 * 16);
  }
  for (std::size_t j = 0; j < group.reads.size(); ++j)
    if (group.reads[j].step < 0) L.irregular.push_back(j);
  L.offs_at = L.total;
  L.total += L.irregular.size() * std::size_t(L.R) * 2;  // int64 offsets, two floats each
  L.natural.resize(group.lead.size());
  for (std::size_t d = group.lead.size(), acc = 1; d-- > 0;) {
    L.natural[d] = std::int64_t(acc);
    acc *= std::size_t(group.lead[d]);
  }
  return L;
}

// The irregular inputs' row offsets for rows [r0, r0 + nr): roff[q * R + i] for input q,
// row i; the multi-index of row r0, then an odometer (idx, cur: scratch).
void irregular_offsets(const FusedGroup& group, const RowLayout& L, std::int64_t r0, std::int64_t nr,
                       std::int64_t* roff, std::vector<std::int64_t>& idx, std::vector<std::int64_t>& cur) {
  const std::size_t lr = group.lead.size(), nq = L.irregular.size();
  auto stride = [&](std::size_t q, std::size_t d) { return group.reads[L.irregular[q]].lead_stride[d]; };
  for (std::size_t d = 0; d < lr; ++d) idx[d] = r0 / L.natural[d] % group.lead[d];
  for (std::size_t q = 0; q < nq; ++q) {
    cur[q] = 0;
    for (std::size_t d = 0; d < lr; ++d) cur[q] += idx[d] * stride(q, d);
  }
  for (std::int64_t i = 0; i < nr; ++i) {
    for (std::size_t q = 0; q < nq; ++q) roff[std::int64_t(q) * L.R + i] = cur[q];
    for (std::size_t d = lr; d-- > 0;) {
      for (std::size_t q = 0; q < nq; ++q) cur[q] += stride(q, d);
      if (++idx[d] < group.lead[d]) break;
      for (std::size_t q = 0; q < nq; ++q) cur[q] -= group.lead[d] * stride(q, d);
      idx[d] = 0;
    }
  }
}

// A member over a block of nr rows of n values that is not arithmetic: a row reduction
// (sum, max), an expand, where, compare. x, y, z: its operands (y, z when it has them).
void row_member(const FusedInstr& ins, std::int64_t nr, std::int64_t n, float* dst, const Rows& x, const Rows& y,
                const Rows& z) {
  const std::int64_t len = ins.reduced ? 1 : n;  // values per row
  bool xc = false, yc = false, zc = false;
  switch (ins.op) {
    case OpKind::sum:
      for (std::int64_t i = 0; i < nr; ++i) dst[i] = simd::sum(std::size_t(n), x.row(i));
      break;
    case OpKind::max:
      for (std::int64_t i = 0; i < nr; ++i) dst[i] = simd::max_of(std::size_t(n), x.row(i));
      break;
    case OpKind::expand:
      if (x.flat(len, xc) && xc) std::fill(dst, dst + nr * len, *x.base);
      else
        for (std::int64_t i = 0; i < nr; ++i) {
          if (x.one) std::fill(dst + i * len, dst + (i + 1) * len, *x.row(i));
          else std::memcpy(dst + i * len, x.row(i), std::size_t(len) * 4);
        }
      break;
    case OpKind::where:
      if (x.flat(len, xc) && y.flat(len, yc) && z.flat(len, zc))
        where_row(nr * len, dst, {x.base, xc}, {y.base, yc}, {z.base, zc});
      else
        for (std::int64_t i = 0; i < nr; ++i) where_row(len, dst + i * len, x.at(i), y.at(i), z.at(i));
      break;
    case OpKind::compare:
      if (x.flat(len, xc) && y.flat(len, yc)) compare_row(ins.cmp, nr * len, dst, {x.base, xc}, {y.base, yc});
      else
        for (std::int64_t i = 0; i < nr; ++i) compare_row(ins.cmp, len, dst + i * len, x.at(i), y.at(i));
      break;
    default:
      GG_CHECK(false && "not a fusible member");
  }
}

// Rows [r0, r0 + nr) of the group, its members in order; buf: this thread's scratch.
void row_block(const FusedGroup& group, std::span<const View> in, const RowLayout& L, const std::vector<float*>& whole,
               float* buf, std::int64_t r0, std::int64_t nr, std::vector<Rows>& ins_rows, std::vector<Rows>& mem_rows) {
  const std::int64_t n = group.n;
  const std::int64_t* roff = reinterpret_cast<const std::int64_t*>(buf + L.offs_at);
  for (std::size_t j = 0, q = 0; j < in.size(); ++j) {
    const FusedRead& rd = group.reads[j];
    ins_rows[j] = rd.step >= 0 ? Rows{in[j].f() + r0 * rd.step, nullptr, rd.step, rd.inner == 0}
                               : Rows{in[j].f(), roff + std::int64_t(q++) * L.R, 0, rd.inner == 0};
  }
  // Member k's block: its own buffer's rows, or its scratch block.
  auto member = [&](std::size_t k) {
    return whole[k] ? whole[k] + r0 * (group.program[k].reduced ? 1 : n) : buf + L.off[k];
  };
  // Operands by reference, each Rows written field by field once a block: copying a
  // just-written Rows whole read it back as one 32-byte load that could not be forwarded
  // from its four 8-byte stores (a store-forwarding stall).
  for (std::size_t k = 0; k < group.program.size(); ++k) {
    const bool red = group.program[k].reduced;
    mem_rows[k] = Rows{member(k), nullptr, red ? 1 : n, red || n == 1};
  }
  auto operand = [&](int o) -> const Rows& { return o < 0 ? ins_rows[std::size_t(-o - 1)] : mem_rows[std::size_t(o)]; };
  for (std::size_t k = 0; k < group.program.size(); ++k) {
    const FusedInstr& ins = group.program[k];
    const std::int64_t len = ins.reduced ? 1 : n;  // values per row
    float* dst = member(k);
    const Rows& x = operand(ins.a);
    if (!op_arithmetic(ins.op)) row_member(ins, nr, n, dst, x, operand(ins.b), operand(ins.c));
    // A unary member's operand has its shape: its block is one run. One pass over the
    // block keeps the unary kernel's SIMD/scalar split.
    else if (op_arity(ins.op) == 1) run_instr(ins.op, nr * len, dst, x.at(0), Operand{nullptr, false});
    else binary_member(ins.op, nr, len, dst, x, operand(ins.b));
  }
}

// Rows [begin, end) of the group (begin a multiple of rows_unit(group)).
void run_rows(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
              std::int64_t begin, std::int64_t end) {
  const std::vector<float*> whole = member_outputs(group, out, stored);
  const RowLayout L = row_layout(group, whole, begin, end);
  parallel_for(L.blocks, std::max<std::int64_t>(1, 16384 / (L.R * group.n)), [&](std::int64_t b, std::int64_t e) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < L.total) scratch.resize(L.total);
    float* buf = scratch.data();
    std::vector<std::int64_t> idx(group.lead.size()), cur(L.irregular.size());
    std::vector<Rows> ins_rows(in.size()), mem_rows(group.program.size());
    for (std::int64_t blk = b; blk < e; ++blk) {
      const std::int64_t r0 = begin + blk * L.R, nr = std::min(L.R, end - r0);
      if (!L.irregular.empty())
        irregular_offsets(group, L, r0, nr, reinterpret_cast<std::int64_t*>(buf + L.offs_at), idx, cur);
      row_block(group, in, L, whole, buf, r0, nr, ins_rows, mem_rows);
    }
  });
}

// The planned nodes' positions in `order`, their distinct readers among them, and the
// nodes that must stay outside groups' interiors.
struct OrderIndex {
  std::vector<int> pos;
  std::vector<std::vector<NodeId>> readers;
  std::vector<char> keep;
};

OrderIndex index_order(const Graph& g, const std::vector<NodeId>& order, const std::vector<NodeId>& kept) {
  const std::size_t N = std::size_t(g.size());
  OrderIndex x{std::vector<int>(N, -1), std::vector<std::vector<NodeId>>(N), std::vector<char>(N, 0)};
  for (NodeId k : kept) x.keep[std::size_t(k)] = 1;
  for (std::size_t s = 0; s < order.size(); ++s) {
    const Node& n = g.node(order[s]);
    x.pos[std::size_t(order[s])] = int(s);
    for (std::size_t i = 0; i < n.inputs.size(); ++i)
      if (std::find(n.inputs.begin(), n.inputs.begin() + std::ptrdiff_t(i), n.inputs[i]) == n.inputs.begin() + std::ptrdiff_t(i))
        x.readers[std::size_t(n.inputs[i])].push_back(order[s]);
  }
  return x;
}

// Readers first: each fusible node joins a readers' group whose root runs before every
// reader outside it (then no path leaves the group and comes back, and those readers find
// the value stored), or starts one. group_of: per node, its index in the result.
std::vector<Building> grow_groups(const Graph& g, const std::vector<NodeId>& order, const OrderIndex& x,
                                  std::vector<int>& group_of) {
  std::vector<Building> building;
  for (std::size_t s = order.size(); s-- > 0;) {
    const NodeId id = order[s];
    const Node& nd = g.node(id);
    const Fit fit = row_fit(g, id);
    const bool flat = flat_fusible(g, id);
    if (!fit.ok && !flat) continue;
    const std::vector<NodeId>& rd = x.readers[std::size_t(id)];
    int joined = -1;
    if (!x.keep[std::size_t(id)])
      for (NodeId cand : rd) {
        const int gi = group_of[std::size_t(cand)];
        if (gi < 0) continue;
        Building& b = building[std::size_t(gi)];
        bool fits = int(b.members.size()) < max_fused_members;
        if (b.flat_only) fits = fits && flat && nd.shape == b.shape;
        else fits = fits && fit.ok && fit.lead == b.lead && (fit.n < 0 || b.n < 0 || fit.n == b.n);
        const int root_pos = x.pos[std::size_t(b.members.front())];
        for (NodeId r : rd) fits = fits && (group_of[std::size_t(r)] == gi || x.pos[std::size_t(r)] > root_pos);
        if (!fits) continue;
        if (!b.flat_only && b.n < 0) b.n = fit.n;
        b.members.push_back(id);
        group_of[std::size_t(id)] = joined = gi;
        break;
      }
    if (joined >= 0) continue;
    Building b;
    b.members = {id};
    b.shape = nd.shape;
    b.flat_only = !fit.ok;  // a row too long: flat members only
    b.lead = fit.lead;
    b.n = fit.n;
    group_of[std::size_t(id)] = int(building.size());
    building.push_back(std::move(b));
  }
  return building;
}

// Group gi from its members (in planned order): its program over its members and inputs,
// the members read outside it (stored), and how a row group reads each input.
FusedGroup make_group(const Graph& g, const Building& b, int gi, const OrderIndex& x, const std::vector<int>& group_of) {
  const std::vector<NodeId>& mem = b.members;
  FusedGroup grp;
  grp.root = mem.back();
  grp.members = mem;
  grp.flat = true;
  for (NodeId m : mem) grp.flat = grp.flat && flat_fusible(g, m) && g.node(m).shape == b.shape;
  grp.lead = b.lead;
  grp.n = b.n < 0 ? 1 : b.n;
  for (NodeId m : mem) {
    const Node& n = g.node(m);
    int operand[3] = {0, 0, 0};
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const NodeId in = n.inputs[i];
      if (group_of[std::size_t(in)] == gi) {
        operand[i] = int(std::find(mem.begin(), mem.end(), in) - mem.begin());
      } else {
        auto it = std::find(grp.inputs.begin(), grp.inputs.end(), in);
        if (it == grp.inputs.end()) it = grp.inputs.insert(grp.inputs.end(), in);
        operand[i] = -int(it - grp.inputs.begin()) - 1;
      }
    }
    FusedInstr ins{n.op, operand[0], operand[1], operand[2]};
    ins.cmp = n.attrs.cmp;
    ins.reduced = !grp.flat && n.shape.back() == 1;
    grp.program.push_back(ins);
  }
  // Members read outside the group are stored.
  for (NodeId m : mem)
    if (m != grp.root && std::any_of(x.readers[std::size_t(m)].begin(), x.readers[std::size_t(m)].end(),
                                     [&](NodeId r) { return group_of[std::size_t(r)] != gi; })) {
      grp.stored.push_back(m);
      grp.program[std::size_t(std::find(mem.begin(), mem.end(), m) - mem.begin())].stored = true;
    }
  if (!grp.flat)
    for (NodeId in : grp.inputs) grp.reads.push_back(read_of(g.node(in).shape, grp.lead, grp.n));
  return grp;
}

}  // namespace

Fusion fuse_elementwise(const Graph& g, const std::vector<NodeId>& order, const std::vector<NodeId>& kept,
                        bool compiled) {
  const OrderIndex x = index_order(g, order, kept);
  Fusion f;
  f.group_of.assign(std::size_t(g.size()), -1);
  std::vector<Building> building = grow_groups(g, order, x, f.group_of);
  // Keep the groups of two or more, numbered in order of their roots, with their programs,
  // and a lone member where a compiled row program runs it (a row program may skip the
  // part of a row a mask zeroes: the attention's weights again from their exponentials
  // and sums, E / s, where the gradient reads them).
  std::fill(f.group_of.begin(), f.group_of.end(), -1);
  std::reverse(building.begin(), building.end());  // roots in planned order
  for (Building& b : building) {
    std::vector<NodeId>& mem = b.members;
    if (mem.size() < 2 && !(compiled && mem.size() == 1 && !b.flat_only)) continue;
    std::sort(mem.begin(), mem.end(), [&](NodeId p, NodeId q) { return x.pos[std::size_t(p)] < x.pos[std::size_t(q)]; });
    const int gi = int(f.groups.size());
    for (NodeId m : mem) f.group_of[std::size_t(m)] = gi;
    FusedGroup grp = make_group(g, b, gi, x, f.group_of);
    if (compiled) grp.compiled = find_compiled(grp, fused_input_forms(g, grp));
    if (mem.size() == 1 && (grp.flat || grp.compiled < 0)) {
      f.group_of[std::size_t(mem[0])] = -1;  // its own kernel, as before
      continue;
    }
    f.groups.push_back(std::move(grp));
  }
  return f;
}

std::int64_t fused_extent(const FusedGroup& group, const View& out) {
  if (group.flat) return out.numel();
  std::int64_t rows = 1;
  for (std::int64_t d : group.lead) rows *= d;
  return rows;
}

void run_fused(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
               std::int64_t begin, std::int64_t end, const RowLimits* limits) {
  GG_CHECK(group.program.size() <= std::size_t(max_fused_members) && in.size() == group.inputs.size());
  GG_CHECK(stored.size() == group.stored.size());
  const std::int64_t extent = fused_extent(group, out);
  if (end < 0) end = extent;
  const std::int64_t W = std::int64_t(simd::width);
  GG_CHECK(0 <= begin && begin <= end && end <= extent && (begin % W == 0 || (!group.flat && group.n % W == 0)));
  if (begin == end) return;
  if (group.compiled >= 0) return run_compiled(group, in, out, stored, begin, end, group.flat ? nullptr : limits);
  run_fused_interpreted(group, in, out, stored, begin, end);
}

void run_fused_interpreted(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
                           std::int64_t begin, std::int64_t end) {
  if (group.flat) run_flat(group, in, out, stored, begin, end);
  else run_rows(group, in, out, stored, begin, end);
}


}  // namespace gg
