// Grouping element-wise chains and running a group tile by tile. A group's step walks its
// output in whole SIMD registers (as the unary kernels do), in tiles of `tile` values;
// for each tile it runs the program member by member, each writing one tile-sized buffer
// on the stack (the root writes the output), so a member's loop is the op's own kernel
// loop on a tile: the same element function on the same SIMD/scalar split.
#include "ops/fuse.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "ops/elementwise_fn.h"
#include "ops/parallel.h"
#include "ops/simd.h"

namespace gg {
namespace {

constexpr std::int64_t tile = 512;  // values per member buffer: 16 members x 2 KiB stay in L1

bool fusible_op(OpKind k) {
  switch (k) {
    case OpKind::add: case OpKind::sub: case OpKind::mul: case OpKind::div: case OpKind::maximum:
    case OpKind::neg: case OpKind::exp: case OpKind::log: case OpKind::sqrt: case OpKind::tanh: case OpKind::erf:
      return true;
    default:
      return false;
  }
}

// An element-wise f32 node of more than one value whose operands are all of its shape or
// of one value.
bool fusible(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (!fusible_op(n.op) || n.dtype != DType::f32 || numel(n.shape) <= 1) return false;
  for (NodeId in : n.inputs) {
    const Node& x = g.node(in);
    if (x.dtype != DType::f32 || (x.shape != n.shape && numel(x.shape) != 1)) return false;
  }
  return true;
}

struct Operand {
  const float* p;
  bool one;  // a single value, broadcast
};

template <class F>
void run_unary(F f, std::int64_t len, float* dst, Operand x) {
  simd::map(std::size_t(len), dst, x.p, f);
}
template <class F>
void run_binary(F f, std::int64_t len, float* dst, Operand x, Operand y) {
  if (x.one) simd::zip_scalar_left(std::size_t(len), dst, *x.p, y.p, f);
  else if (y.one) simd::zip_scalar_right(std::size_t(len), dst, x.p, *y.p, f);
  else simd::zip(std::size_t(len), dst, x.p, y.p, f);
}

void run_instr(OpKind op, std::int64_t len, float* dst, Operand x, Operand y) {
  switch (op) {
    case OpKind::add: return run_binary(fn::add{}, len, dst, x, y);
    case OpKind::sub: return run_binary(fn::sub{}, len, dst, x, y);
    case OpKind::mul: return run_binary(fn::mul{}, len, dst, x, y);
    case OpKind::div: return run_binary(fn::div{}, len, dst, x, y);
    case OpKind::maximum: return run_binary(fn::maximum{}, len, dst, x, y);
    case OpKind::neg: return run_unary(fn::neg{}, len, dst, x);
    case OpKind::exp: return run_unary(fn::exp{}, len, dst, x);
    case OpKind::log: return run_unary(fn::log{}, len, dst, x);
    case OpKind::sqrt: return run_unary(fn::sqrt{}, len, dst, x);
    case OpKind::tanh: return run_unary(fn::tanh{}, len, dst, x);
    case OpKind::erf: return run_unary(fn::erf{}, len, dst, x);
    default: GG_CHECK(false && "not a fusible op");
  }
}

}  // namespace

Fusion fuse_elementwise(const Graph& g, const std::vector<NodeId>& order, const std::vector<NodeId>& kept) {
  const std::size_t N = std::size_t(g.size());
  std::vector<int> readers(N, 0), pos(N, -1);
  std::vector<char> keep(N, 0);
  for (NodeId k : kept) keep[std::size_t(k)] = 1;
  for (std::size_t s = 0; s < order.size(); ++s) {
    const Node& n = g.node(order[s]);
    pos[std::size_t(order[s])] = int(s);
    for (std::size_t i = 0; i < n.inputs.size(); ++i)
      if (std::find(n.inputs.begin(), n.inputs.begin() + std::ptrdiff_t(i), n.inputs[i]) == n.inputs.begin() + std::ptrdiff_t(i))
        ++readers[std::size_t(n.inputs[i])];  // distinct readers
  }
  // Every fusible node starts a group of its own and absorbs the groups of those operands
  // that only it reads; a group that was absorbed is left empty.
  Fusion f;
  f.group_of.assign(N, -1);
  std::vector<std::vector<NodeId>> members;
  for (NodeId id : order) {
    if (!fusible(g, id)) continue;
    std::vector<NodeId> mine;
    for (NodeId in : g.node(id).inputs) {
      const int gi = f.group_of[std::size_t(in)];
      if (gi < 0 || members[std::size_t(gi)].empty() || readers[std::size_t(in)] != 1 || keep[std::size_t(in)]) continue;
      if (int(mine.size() + members[std::size_t(gi)].size()) + 1 > max_fused_members) continue;
      mine.insert(mine.end(), members[std::size_t(gi)].begin(), members[std::size_t(gi)].end());
      members[std::size_t(gi)].clear();
    }
    mine.push_back(id);
    for (NodeId m : mine) f.group_of[std::size_t(m)] = int(members.size());
    members.push_back(std::move(mine));
  }
  // Keep the groups of two or more, numbered in order of their roots, with their programs.
  std::fill(f.group_of.begin(), f.group_of.end(), -1);
  for (auto& mem : members) {
    if (mem.size() < 2) continue;
    std::sort(mem.begin(), mem.end(), [&](NodeId a, NodeId b) { return pos[std::size_t(a)] < pos[std::size_t(b)]; });
    FusedGroup grp;
    grp.root = mem.back();
    grp.members = mem;
    for (NodeId m : mem) f.group_of[std::size_t(m)] = int(f.groups.size());
    for (NodeId m : mem) {
      const Node& n = g.node(m);
      int operand[2] = {0, 0};
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        const NodeId in = n.inputs[i];
        if (f.group_of[std::size_t(in)] == int(f.groups.size())) {
          operand[i] = int(std::find(mem.begin(), mem.end(), in) - mem.begin());
        } else {
          auto it = std::find(grp.inputs.begin(), grp.inputs.end(), in);
          if (it == grp.inputs.end()) it = grp.inputs.insert(grp.inputs.end(), in);
          operand[i] = -int(it - grp.inputs.begin()) - 1;
        }
      }
      grp.program.push_back({n.op, operand[0], operand[1]});
    }
    f.groups.push_back(std::move(grp));
  }
  return f;
}

void run_fused(const FusedGroup& group, std::span<const View> in, View out) {
  const std::int64_t n = out.numel(), w = std::int64_t(simd::width);
  const std::size_t count = group.program.size();
  GG_CHECK(count <= std::size_t(max_fused_members) && in.size() == group.inputs.size());
  // Chunks in whole registers, as unary_kernel: only the last value(s) take the scalar tail.
  parallel_for((n + w - 1) / w, 8192 / w, [&](std::int64_t b, std::int64_t e) {
    alignas(64) float buf[max_fused_members][tile];
    const std::int64_t lo = b * w, hi = std::min(n, e * w);
    for (std::int64_t t0 = lo; t0 < hi; t0 += tile) {
      const std::int64_t len = std::min(tile, hi - t0);
      auto operand = [&](int o) -> Operand {
        if (o >= 0) return {buf[o], false};
        const View& v = in[std::size_t(-o - 1)];
        return v.numel() == 1 ? Operand{v.f(), true} : Operand{v.f() + t0, false};
      };
      for (std::size_t k = 0; k < count; ++k) {
        const FusedInstr& ins = group.program[k];
        float* dst = k + 1 == count ? out.f() + t0 : buf[k];
        const bool unary = op_arity(ins.op) == 1;
        run_instr(ins.op, len, dst, operand(ins.a), unary ? Operand{nullptr, false} : operand(ins.b));
      }
    }
  });
}

bool fuse_by_default() {
  const char* env = std::getenv("GG_FUSE");
  return !(env && std::string(env) == "0");
}

}  // namespace gg
