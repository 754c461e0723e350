// Planning and running: order the needed nodes, give every intermediate an offset in one
// arena (a buffer is reused once its last reader has run), then loop over the steps.
#include "ops/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <string_view>

#include <unistd.h>

#include "ops/fuse_compiled.h"
#include "ops/gemm.h"
#include "ops/masked.h"
#include "ops/parallel.h"
#include "ops/simd.h"

namespace gg {
namespace {
std::size_t round64(std::size_t b) { return (b + 63) / 64 * 64; }
std::size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : SIZE_MAX;
}

}  // namespace

Executor::Executor(const Graph& g, std::vector<NodeId> outputs, ParamStore& params, std::uint64_t seed,
                   ExecutorOptions options)
    : user_g_(g),
      simplified_(prepare(g, outputs, options)),
      g_(options.simplify || options.remat ? simplified_.graph : g),
      params_(params),
      outputs_(simplified_.roots),
      rng_(seed) {
  detect_anomaly_ = options.detect_anomaly;
  // Phases: simplify (in the initializers), order, fuse, plan the memory, bind views,
  // steps, checks.
  order_ = ancestors(g_, outputs_);
  number_order();
  if (options.fuse) {
    fusion_ = fuse_elementwise(g_, order_, read_after_steps(), options.compiled);
  }
  user_order_.assign(order_.size(), -1);
  for (NodeId id = 0; id < g.size(); ++id)
    if (const NodeId p = simplified_.map[std::size_t(id)]; p >= 0) {
      const int step = step_of_[std::size_t(p)];  // -1: a node the outputs do not need
      if (step >= 0 && user_order_[std::size_t(step)] < 0) user_order_[std::size_t(step)] = id;
    }
  if (options.slice) plan_slices();
  masked_ = options.masked;
  plan_locals();
  in_place_option_ = options.in_place;
  plan_in_place();
  plan_epilogues(options.epilogue);
  std::vector<std::size_t> offset;
  std::vector<NodeId> root;
  plan_memory(offset, root);
  bind_views(offset, root);
  make_steps();
  const std::vector<int> step_at = step_index();
  bind_slices(step_at);
  epilogue_step_.assign(steps_.size(), -1);
  by_epilogue_.assign(steps_.size(), 0);
  for (std::size_t t = 0; t < steps_.size(); ++t)
    if (const NodeId r = epilogue_for_[std::size_t(steps_[t].id)]; r >= 0) {
      epilogue_step_[t] = step_at[std::size_t(r)];
      by_epilogue_[std::size_t(step_at[std::size_t(r)])] = 1;
    }
  plan_checks(step_of_, step_at);
}

std::vector<NodeId> Executor::read_after_steps() const {
  std::vector<NodeId> ids = outputs_;
  for (const Graph::Check& c : g_.checks()) ids.push_back(c.node);
  return ids;
}

std::size_t Executor::in_place_permutes() const {
  return std::size_t(std::count(in_place_step_.begin(), in_place_step_.end(), 1));
}

namespace {
// Each switch's name and member, in the order the passes run.
struct Switch {
  std::string_view name;
  bool ExecutorOptions::*member;
};
constexpr Switch kSwitches[] = {{"simplify", &ExecutorOptions::simplify}, {"remat", &ExecutorOptions::remat},
                                {"fuse", &ExecutorOptions::fuse},         {"slice", &ExecutorOptions::slice},
                                {"masked", &ExecutorOptions::masked},     {"in-place", &ExecutorOptions::in_place},
                                {"epilogue", &ExecutorOptions::epilogue}};
}  // namespace

const std::vector<std::string>& executor_switch_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Switch& s : kSwitches) v.emplace_back(s.name);
    return v;
  }();
  return names;
}

bool set_executor_switch(ExecutorOptions& o, std::string_view name, bool on) {
  for (const Switch& s : kSwitches)
    if (s.name == name) {
      o.*s.member = on;
      return true;
    }
  return false;
}

std::string switches_off(const ExecutorOptions& o) {
  std::string off;
  for (const Switch& s : kSwitches)
    if (!(o.*s.member)) off += (off.empty() ? "" : ",") + std::string(s.name);
  return off;
}

const std::vector<std::pair<std::string, unsigned>>& skip_work_names() {
  static const std::vector<std::pair<std::string, unsigned>> names = {{"products", skip_products},
                                                                      {"groups", skip_groups},
                                                                      {"ops", skip_ops},
                                                                      {"chain-products", skip_chain_products},
                                                                      {"chain-groups", skip_chain_groups}};
  return names;
}

std::size_t Executor::epilogue_groups() const {
  return std::size_t(std::count(by_epilogue_.begin(), by_epilogue_.end(), 1));
}

// Which groups run as an epilogue: those with a transcendental member (erf, exp, tanh,
// log), whose cost is computing rather than moving values. On the small GPT that is the
// GELU after the MLP's first layer (whose separate pass ran only 1.3-1.6x faster on 2
// threads than on 1): the step 0.2-2.6% faster on 2 threads on a Zen 5, the same on 1
// (same-process A/B of the two plans). The layer norms after the projections measured no
// faster (0.3-0.7% slower on 1 thread), the q/k/v bias adds as epilogues of one member
// 0.1-1.5% slower: their product's result, (768, 128), stays in cache between the steps
// anyway. The GELU's gradient is not the next step after its product (the weight gradient
// x^T @ dy runs between, reading the same dy): moved next to it, the step measured 0.5-0.7%
// slower; run as its epilogue with the weight gradient still between, 0.6-1.2% slower. The
// medium GPT's step measured the same either way.
bool epilogue_worth(const FusedGroup& grp) {
  return std::any_of(grp.program.begin(), grp.program.end(), [](const FusedInstr& f) { return transcendental(f.op); });
}

// A fused group G runs as the epilogue of the matrix product P (ExecutorOptions::epilogue)
// when P is one tall GEMM (ops/matmul.cpp: B a matrix, A not transposed) with rows of N
// values, a whole number of registers; G reads P's value as it is, row for row (a row group
// over rows of N, or a flat one over all of it); nothing but G's own members, views and
// leaves lies between P and G's root in the order; and G reads nothing made after P.
// Neither is in a chain. G then runs on each block of P's rows once the block is final,
// while P still reads its operands for other rows: plan_memory keeps P's operands alive
// until G's place, so G's values never land on them; everything else G writes is placed at
// G's place as before, after nothing but P ran.
void Executor::plan_epilogues(bool on) {
  epilogue_for_.assign(std::size_t(g_.size()), -1);
  if (!on || fusion_.groups.empty()) return;
  std::vector<char> in_chain(order_.size(), 0);
  for (const SliceChain& c : chains_)
    for (std::size_t s = c.first; s <= c.last; ++s) in_chain[s] = 1;
  auto source = [&](NodeId id) {  // through views
    while (g_.node(id).op == OpKind::reshape) id = g_.node(id).inputs[0];
    return id;
  };
  for (std::size_t gi = 0; gi < fusion_.groups.size(); ++gi) {
    const FusedGroup& grp = fusion_.groups[gi];
    const int sg = step_of_[std::size_t(grp.root)];
    if (sg < 0 || in_chain[std::size_t(sg)] || !epilogue_worth(grp)) continue;
    int sm = sg - 1;  // the step before G's: past G's members, views and leaves
    for (; sm >= 0; --sm) {
      const Node& n = g_.node(order_[std::size_t(sm)]);
      if (group_at(order_[std::size_t(sm)]) != int(gi) && n.op != OpKind::reshape && !op_bound_leaf(n.op)) break;
    }
    if (sm < 0 || in_chain[std::size_t(sm)]) continue;
    const NodeId mm = order_[std::size_t(sm)];
    const Node& m = g_.node(mm);
    if (m.op != OpKind::matmul || m.dtype != DType::f32 || m.attrs.trans_a || in_place_[std::size_t(mm)].to >= 0 ||
        g_.node(m.inputs[1]).shape.size() != 2 || epilogue_for_[std::size_t(mm)] >= 0)
      continue;
    const std::int64_t N = m.shape.back(), rows = N > 0 ? numel(m.shape) / N : 0;
    if (rows <= 0) continue;
    const Shape& out = g_.node(grp.root).shape;
    std::int64_t group_rows = 1;
    for (std::int64_t d : grp.lead) group_rows *= d;
    // Rows of whole registers: a block of rows then splits into SIMD and scalar work as the
    // whole product's rows do (run_fused).
    const bool fits = N % std::int64_t(simd::width) == 0 &&
                      (grp.flat ? numel(out) == rows * N : grp.n == N && group_rows == rows);
    if (!fits) continue;
    bool reads_product = false, ready = true;
    for (NodeId in : grp.inputs) {
      const NodeId src = source(in);
      if (src == mm) {
        reads_product = true;
        ready = ready && (grp.flat ? numel(g_.node(in).shape) == rows * N : g_.node(in).shape == out);
      } else if (!op_bound_leaf(g_.node(src).op) && step_of_[std::size_t(src)] >= sm) {
        ready = false;  // made after P
      }
    }
    if (reads_product && ready) epilogue_for_[std::size_t(mm)] = grp.root;
  }
}

std::size_t Executor::chain_local_values() const {
  return std::size_t(std::count_if(local_off_.begin(), local_off_.end(), [](std::int64_t o) { return o >= 0; }));
}

std::size_t Executor::masked_products() const {
  std::size_t k = 0;
  for (const SliceChain& c : chains_)
    for (const SliceStep& ss : c.steps) k += ss.masked != nullptr;
  return k;
}

std::size_t Executor::masked_groups() const {
  std::size_t k = 0;
  for (const SliceChain& c : chains_)
    for (const SliceStep& ss : c.steps) k += ss.rows != nullptr;
  return k;
}

namespace {
bool starts_with(const Shape& s, const Shape& lead) {
  return s.size() > lead.size() && std::equal(lead.begin(), lead.end(), s.begin());
}
// Per L dim, the element stride of an input of shape `in` read by an output of rank `r`
// whose leading dims are L (0 where the input broadcasts); false if it cannot be sliced.
bool lead_strides(const Shape& in, std::size_t r, const Shape& lead, std::vector<std::int64_t>& stride) {
  stride.assign(lead.size(), 0);
  for (std::size_t d = 0; d < lead.size(); ++d) {
    const std::ptrdiff_t od = std::ptrdiff_t(d) - std::ptrdiff_t(r) + std::ptrdiff_t(in.size());
    const std::int64_t dim = od >= 0 ? in[std::size_t(od)] : 1;
    if (dim == 1) continue;
    if (dim != lead[d]) return false;
    std::int64_t inner = 1;
    for (std::size_t e = std::size_t(od) + 1; e < in.size(); ++e) inner *= in[e];
    stride[d] = inner;
  }
  return true;
}
}  // namespace

int Executor::group_at(NodeId id) const { return fusion_.group_of.empty() ? -1 : fusion_.group_of[std::size_t(id)]; }

void Executor::number_order() {
  step_of_.assign(std::size_t(g_.size()), -1);
  for (std::size_t s = 0; s < order_.size(); ++s) step_of_[std::size_t(order_[s])] = int(s);
}

void Executor::bind_inputs(Step& st) {
  st.in.clear();
  for (NodeId in : reads(st)) st.in.push_back(views_[std::size_t(in)]);
}

// Chains: from a batched matmul (both operands batched over the same dims L, at least two
// batches), as many following steps as can run one L-slice at a time: batched matmuls over
// L, fused groups whose rows start with L, element-wise ops and reductions over later axes
// (inputs from outside the chain may broadcast over L, values made inside it are read
// slice by slice), and reshapes that keep L. A slice of a step computes exactly what the
// step computes for those rows, so the values do not change: each slice's row blocks start
// on a register boundary (rows or values per slice a multiple of the SIMD width), and
// every kernel on a slice is the whole-tensor kernel on a view.
void Executor::plan_slices() {
  const std::int64_t W = std::int64_t(simd::width);
  // Leaves (inputs, parameters, constants) exist before any step runs: listed first, a step
  // moved ahead of a chain below never comes before a leaf it reads.
  {
    std::vector<std::size_t> perm(order_.size());
    for (std::size_t s = 0; s < perm.size(); ++s) perm[s] = s;
    std::stable_partition(perm.begin(), perm.end(), [&](std::size_t s) { return op_bound_leaf(g_.node(order_[s]).op); });
    std::vector<NodeId> order(order_.size()), user_order(order_.size());
    for (std::size_t s = 0; s < perm.size(); ++s) {
      order[s] = order_[perm[s]];
      user_order[s] = user_order_[perm[s]];
    }
    order_ = std::move(order);
    user_order_ = std::move(user_order);
    number_order();
  }
  std::vector<std::size_t> pos;  // positions of the step nodes in order_
  for (std::size_t s = 0; s < order_.size(); ++s) {
    const NodeId id = order_[s];
    const int gi = group_at(id);
    if (op_bound_leaf(g_.node(id).op) || (gi >= 0 && fusion_.groups[std::size_t(gi)].root != id)) continue;
    pos.push_back(s);
  }
  std::vector<char> inside(std::size_t(g_.size()), 0);
  auto sliceable = [&](NodeId id, const Shape& L) {
    const Node& n = g_.node(id);
    const std::int64_t C = numel(L);
    std::vector<std::int64_t> stride;
    const int gi = group_at(id);
    if (gi >= 0) {
      const FusedGroup& grp = fusion_.groups[std::size_t(gi)];
      for (NodeId in : grp.inputs)
        if (inside[std::size_t(in)] && !starts_with(g_.node(in).shape, L)) return false;
      if (grp.flat) {
        if (!starts_with(n.shape, L) || (numel(n.shape) / C) % W != 0) return false;
        for (NodeId in : grp.inputs)
          if (g_.node(in).shape != n.shape && numel(g_.node(in).shape) != 1) return false;
        return true;
      }
      if (grp.lead.size() <= L.size() || !std::equal(L.begin(), L.end(), grp.lead.begin())) return false;
      std::int64_t rows = 1;
      for (std::size_t d = L.size(); d < grp.lead.size(); ++d) rows *= grp.lead[d];
      return rows % W == 0;
    }
    if (!starts_with(n.shape, L)) return false;
    for (NodeId in : n.inputs) {
      const Shape& si = g_.node(in).shape;
      if (!lead_strides(si, n.shape.size(), L, stride)) return false;
      if (inside[std::size_t(in)] && !starts_with(si, L)) return false;
    }
    if (n.op == OpKind::matmul) {
      for (NodeId in : n.inputs)
        if (g_.node(in).shape.size() != L.size() + 2 || !starts_with(g_.node(in).shape, L)) return false;
      return n.shape.size() == L.size() + 2;
    }
    if (op_elementwise(n.op)) return (numel(n.shape) / C) % W == 0;
    if (n.op == OpKind::sum || n.op == OpKind::max) return n.attrs.axis >= std::int64_t(L.size());
    if (n.op == OpKind::reshape) return starts_with(g_.node(n.inputs[0]).shape, L);
    return false;
  };
  auto mark = [&](NodeId id) {
    inside[std::size_t(id)] = 1;
    const int gi = group_at(id);
    if (gi >= 0)
      for (NodeId m : fusion_.groups[std::size_t(gi)].stored) inside[std::size_t(m)] = 1;
  };
  for (std::size_t k = 0; k < pos.size(); ++k) {
    const Node& n = g_.node(order_[pos[k]]);
    const int gi = group_at(order_[pos[k]]);
    if (gi >= 0 || n.op != OpKind::matmul || n.shape.size() < 3) continue;
    const Shape L(n.shape.begin(), n.shape.end() - 2);
    if (numel(L) < 2 || !sliceable(order_[pos[k]], L)) continue;
    std::size_t j = k, compute = 0;
    for (; j < pos.size(); ++j) {
      const Node& nj = g_.node(order_[pos[j]]);
      // reads only leaves (a constant mask's reshape), which exist before any step runs
      const bool outside = group_at(order_[pos[j]]) < 0 && !nj.inputs.empty() &&
                           std::all_of(nj.inputs.begin(), nj.inputs.end(), [&](NodeId in) { return op_bound_leaf(g_.node(in).op); });
      if (j > k && (nj.op == OpKind::random || (outside && !sliceable(order_[pos[j]], L)))) {
        // A step that reads nothing the chain makes (a dropout mask's draw; a reshape of a
        // constant mask) moves to just before the chain, so that it does not cut it. Draws
        // keep their order among themselves, and so the numbers.
        std::rotate(order_.begin() + std::ptrdiff_t(pos[k]), order_.begin() + std::ptrdiff_t(pos[j]),
                    order_.begin() + std::ptrdiff_t(pos[j]) + 1);
        std::rotate(user_order_.begin() + std::ptrdiff_t(pos[k]), user_order_.begin() + std::ptrdiff_t(pos[j]),
                    user_order_.begin() + std::ptrdiff_t(pos[j]) + 1);
        for (std::size_t q = j; q > k; --q) pos[q] = pos[q - 1] + 1;
        ++k;  // the chain now starts one step later; pos[k - 1] is the moved step
        number_order();
        continue;
      }
      if (!sliceable(order_[pos[j]], L)) break;
      mark(order_[pos[j]]);
      if (g_.node(order_[pos[j]]).op != OpKind::reshape) ++compute;
    }
    std::fill(inside.begin(), inside.end(), 0);
    if (compute >= 2) {
      SliceChain c;
      c.first = pos[k];
      c.last = pos[j - 1];
      c.lead = L;
      c.slices = numel(L);
      chains_.push_back(std::move(c));
    }
    k = j - 1;
  }
}

// Values a chain makes and only its own steps read, none by a view (reshape) and none an
// output or checked, are read by the same slice's pass that made them: each thread keeps
// them for the slice it runs in a scratch block that stays in cache, and they take no
// place in the arena (the attention chains' (T, T) scores, weights and their gradients).
void Executor::plan_locals() {
  local_off_.assign(std::size_t(g_.size()), -1);
  if (chains_.empty()) return;
  std::vector<char> kept(std::size_t(g_.size()), 0);
  for (NodeId id : read_after_steps()) kept[std::size_t(id)] = 1;
  auto made_at = [&](NodeId id) {  // where a value is computed: a group member's at its root
    const int gi = group_at(id);
    return step_of_[std::size_t(gi >= 0 ? fusion_.groups[std::size_t(gi)].root : id)];
  };
  std::vector<std::vector<NodeId>> readers(std::size_t(g_.size()));
  for (NodeId id : order_)
    for (NodeId in : g_.node(id).inputs) readers[std::size_t(in)].push_back(id);
  for (SliceChain& c : chains_) {
    const int first = int(c.first), last = int(c.last);
    for (std::size_t s = c.first; s <= c.last; ++s) {
      const NodeId id = order_[s];
      const Node& n = g_.node(id);
      if (op_bound_leaf(n.op) || n.op == OpKind::reshape || n.dtype != DType::f32 || never_stored(id) ||
          kept[std::size_t(id)] || !starts_with(n.shape, c.lead) || readers[std::size_t(id)].empty())
        continue;
      const int at = made_at(id);
      if (at < first || at > last) continue;
      const bool inside_only = std::all_of(readers[std::size_t(id)].begin(), readers[std::size_t(id)].end(), [&](NodeId r) {
        const int p = made_at(r);
        return p >= first && p <= last && g_.node(r).op != OpKind::reshape;
      });
      if (!inside_only) continue;
      local_off_[std::size_t(id)] = std::int64_t(c.scratch_bytes);
      c.scratch_bytes += round64(std::size_t(numel(n.shape) / c.slices) * 4);
    }
  }
}

// The head split and merge of attention are permutes between (B, T, H, hd) and
// (B, H, T, hd), and the chains' products read or make the (B, H, T, hd) side: a slice
// (b, h) of it is a (T, hd) matrix whose rows are H * hd apart on the other side. A
// permute P of X whose every reader is a product in a chain with leads L, P's shape L + (R,
// C) and its last axis X's last, is not run: the products read their slices from X with X's
// strides. A chain's product whose only reader is a permute Q, outside the chains, with the
// last axis kept last, writes its slices straight into Q's output, and Q is not run. The
// products get the same operands and sum the same terms in the same order, so no value
// changes; a run that goes step by step (anomaly mode) runs the permutes.
void Executor::plan_in_place() {
  const std::size_t N = std::size_t(g_.size());
  in_place_.assign(N, {});
  in_place_step_.assign(N, 0);
  if (chains_.empty() || !in_place_option_) return;
  std::vector<char> kept(N, 0);  // read after the steps, or checked: needs its own value
  for (NodeId id : read_after_steps()) kept[std::size_t(id)] = 1;
  for (const Graph::Check& ck : g_.checks()) kept[std::size_t(ck.node)] = 1;
  // The step each node is computed at: a group member's at its root (whose step reads it).
  auto step_node = [&](NodeId id) {
    const int gi = group_at(id);
    return gi >= 0 ? fusion_.groups[std::size_t(gi)].root : id;
  };
  std::vector<std::vector<NodeId>> readers(N);  // the step nodes that read each node
  for (NodeId id : order_)
    for (NodeId in : g_.node(id).inputs) readers[std::size_t(in)].push_back(step_node(id));
  std::vector<int> chain_of(N, -1);  // per step node inside a chain: the chain
  for (std::size_t ci = 0; ci < chains_.size(); ++ci)
    for (std::size_t s = chains_[ci].first; s <= chains_[ci].last; ++s) chain_of[std::size_t(order_[s])] = int(ci);
  auto product_in_chain = [&](NodeId id) {
    return chain_of[std::size_t(id)] >= 0 && group_at(id) < 0 && g_.node(id).op == OpKind::matmul;
  };
  auto lead_rank = [&](NodeId id) { return chains_[std::size_t(chain_of[std::size_t(id)])].lead.size(); };
  auto plain_permute = [&](NodeId id) {
    const Node& n = g_.node(id);
    return n.op == OpKind::permute && n.dtype == DType::f32 && group_at(id) < 0 && chain_of[std::size_t(id)] < 0 &&
           !kept[std::size_t(id)] && local_off_[std::size_t(id)] < 0;
  };
  // Results written into the permute that reads them.
  for (std::size_t s = 0; s < order_.size(); ++s) {
    const NodeId id = order_[s];
    if (!product_in_chain(id) || kept[std::size_t(id)] || local_off_[std::size_t(id)] >= 0) continue;
    if (readers[std::size_t(id)].size() != 1) continue;
    const NodeId q = readers[std::size_t(id)][0];
    if (!plain_permute(q)) continue;
    const Shape& perm = g_.node(q).attrs.dims;
    const Shape ost = strides_of(g_.node(q).shape);
    std::vector<std::int64_t> axis(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) axis[std::size_t(perm[i])] = ost[i];
    if (axis.size() != lead_rank(id) + 2 || axis.back() != 1) continue;
    in_place_[std::size_t(id)] = {q, true, std::move(axis)};
    in_place_step_[std::size_t(q)] = 1;
  }
  // Operands read from the permute's input.
  for (NodeId id : order_) {
    if (!plain_permute(id) || in_place_step_[std::size_t(id)] || readers[std::size_t(id)].empty()) continue;
    const Node& n = g_.node(id);
    const NodeId x = n.inputs[0];
    // X needs storage of its own to read from, bound before the chain runs.
    if (in_place_[std::size_t(x)].to >= 0 || local_off_[std::size_t(x)] >= 0 || never_stored(x) ||
        g_.node(x).dtype != DType::f32)
      continue;
    const Shape xst = strides_of(g_.node(x).shape);
    std::vector<std::int64_t> axis(n.attrs.dims.size());
    for (std::size_t i = 0; i < axis.size(); ++i) axis[i] = xst[std::size_t(n.attrs.dims[i])];
    const bool all_products = std::all_of(readers[std::size_t(id)].begin(), readers[std::size_t(id)].end(),
                                          [&](NodeId r) { return product_in_chain(r) && axis.size() == lead_rank(r) + 2; });
    if (!all_products || axis.back() != 1) continue;
    in_place_[std::size_t(id)] = {x, false, std::move(axis)};
    in_place_step_[std::size_t(id)] = 1;
  }
}

// Full-size storage for the chains' local values and the in-place ones, for runs that go
// step by step.
void Executor::bind_locals_unsliced() {
  auto own = [&](NodeId id) { return local_off_[std::size_t(id)] >= 0 || in_place_[std::size_t(id)].to >= 0; };
  std::size_t bytes = 0;
  for (NodeId id : order_)
    if (own(id)) bytes += round64(std::size_t(numel(g_.node(id).shape)) * 4);
  if (bytes == 0 || local_full_) return;
  local_full_.reset(aligned_alloc64(bytes));
  char* p = static_cast<char*>(local_full_.get());
  for (NodeId id : order_)
    if (own(id)) {
      views_[std::size_t(id)].data = p;
      p += round64(std::size_t(numel(g_.node(id).shape)) * 4);
    }
  for (Step& st : steps_) {
    st.out.data = views_[std::size_t(st.id)].data;
    if (st.group >= 0)
      for (std::size_t k = 0; k < st.stored.size(); ++k)
        st.stored[k].data = views_[std::size_t(fusion_.groups[std::size_t(st.group)].stored[k])].data;
  }
}

// Per node of g_: the index in steps_ of the step that computes it, or -1.
std::vector<int> Executor::step_index() const {
  std::vector<int> at(std::size_t(g_.size()), -1);
  for (std::size_t t = 0; t < steps_.size(); ++t) at[std::size_t(steps_[t].id)] = int(t);
  return at;
}

// The chains' steps: indices into steps_, and each step's per-slice views.
void Executor::bind_slices(const std::vector<int>& step_at) {
  chain_at_.assign(steps_.size(), -1);
  if (chains_.empty()) return;
  // Per node: how a product may skip a mask's zeros; per group: the rows' parts to compute.
  MaskedPlan masked;
  if (masked_) masked = find_masked(g_, order_, read_after_steps(), fusion_);
  for (std::size_t ci = 0; ci < chains_.size(); ++ci) {
    SliceChain& c = chains_[ci];
    c.first = std::size_t(step_at[std::size_t(order_[c.first])]);
    c.last = std::size_t(step_at[std::size_t(order_[c.last])]);
    chain_at_[c.first] = int(ci);
    for (std::size_t t = c.first; t <= c.last; ++t) {
      const Step& st = steps_[t];
      const Node& n = g_.node(st.id);
      SliceStep ss;
      if (st.group >= 0) {
        ss.extent = fused_extent(fusion_.groups[std::size_t(st.group)], st.out) / c.slices;
        if (!masked.rows.empty()) ss.rows = masked.rows[std::size_t(st.group)];
      } else {
        auto sliced = [&](Shape s) {  // the L dims (as aligned to the output) set to 1
          const std::size_t r = n.shape.size();
          for (std::size_t d = 0; d < c.lead.size(); ++d)
            if (const std::ptrdiff_t od = std::ptrdiff_t(d) - std::ptrdiff_t(r) + std::ptrdiff_t(s.size()); od >= 0)
              s[std::size_t(od)] = 1;
          return s;
        };
        for (NodeId in : n.inputs) {
          std::vector<std::int64_t> stride;
          GG_CHECK(lead_strides(g_.node(in).shape, n.shape.size(), c.lead, stride));
          ss.in_stride.push_back(std::move(stride));
          ss.in_shape.push_back(sliced(g_.node(in).shape));
        }
        ss.out_shape = sliced(n.shape);
        ss.out_elems = numel(n.shape) / c.slices;
        const std::size_t l = c.lead.size();
        ss.in_from.assign(n.inputs.size(), -1);
        SliceStrides ld;
        std::int64_t* in_ld[2] = {&ld.a, &ld.b};
        for (std::size_t j = 0; j < n.inputs.size() && n.op == OpKind::matmul; ++j)
          if (const InPlace& ip = in_place_[std::size_t(n.inputs[j])]; ip.to >= 0 && !ip.writes) {
            ss.in_from[j] = ip.to;
            ss.in_stride[j].assign(ip.axis_stride.begin(), ip.axis_stride.begin() + std::ptrdiff_t(l));
            *in_ld[j] = ip.axis_stride[l];
            ss.strided = true;
          }
        if (const InPlace& ip = in_place_[std::size_t(st.id)]; ip.writes) {
          ss.out_to = ip.to;
          ss.out_stride.assign(ip.axis_stride.begin(), ip.axis_stride.begin() + std::ptrdiff_t(l));
          ld.c = ip.axis_stride[l];
          ss.strided = true;
        }
        ss.ld_a = ld.a, ss.ld_b = ld.b, ss.ld_c = ld.c;
        if (!masked.products.empty() && masked.products[std::size_t(st.id)].kind != MaskedProduct::none)
          ss.masked = std::make_shared<const MaskedBlocks>(masked_blocks(g_, n, masked.products[std::size_t(st.id)]));
      }
      for (NodeId in : reads(st)) ss.in_local.push_back(local_off_[std::size_t(in)]);
      ss.out_local = local_off_[std::size_t(st.id)];
      if (st.group >= 0)
        for (NodeId m : fusion_.groups[std::size_t(st.group)].stored) ss.stored_local.push_back(local_off_[std::size_t(m)]);
      ss.any_local = ss.out_local >= 0 || std::any_of(ss.in_local.begin(), ss.in_local.end(), [](std::int64_t o) { return o >= 0; }) ||
                     std::any_of(ss.stored_local.begin(), ss.stored_local.end(), [](std::int64_t o) { return o >= 0; });
      c.steps.push_back(std::move(ss));
    }
  }
}

namespace {
// A thread's scratch for the local values of the chain it runs (grown on demand, kept).
char* chain_scratch(std::size_t bytes) {
  struct Block {
    std::unique_ptr<void, void (*)(void*)> p{nullptr, aligned_free};
    std::size_t cap = 0;
  };
  thread_local Block b;
  if (bytes > b.cap) {
    b.p.reset(aligned_alloc64(bytes));
    b.cap = bytes;
  }
  return static_cast<char*>(b.p.get());
}
}  // namespace

// Asks for the values that step t of a chain reads from outside the chain for `slice`, into
// L2, while the thread runs step t of the slice before it: a slice's operands are rows of
// tensors made long before (a backward chain reads q, k, v, dO and the softmax's stored
// exponentials from the forward pass), which the hardware prefetchers cannot see coming at
// the jump from one slice to the next. Values the same for every slice, and those made
// inside the chain, are left alone. Measured on a Zen 5 (GG_NUM_THREADS=1, step profile):
// the small model's backward chains 1.55-1.62 -> 1.32-1.39 ms a step, the forward ones and
// the medium model's (whose slices are 16 times larger) unchanged within the noise; asking
// for the lines a group will store as well measured nothing.
void Executor::prefetch_slice(const SliceChain& c, std::size_t t, std::int64_t slice, std::vector<std::int64_t>& idx) const {
  const Step& st = steps_[t];
  const SliceStep& ss = c.steps[t - c.first];
  auto lines = [](const char* p, std::int64_t bytes) {
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p) + std::uintptr_t(bytes);
    for (std::uintptr_t q = reinterpret_cast<std::uintptr_t>(p) / 64 * 64; q < end; q += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(q), 0, 2);
  };
  if (st.group >= 0) {  // a row group's full-row inputs: the slice's rows, one after another
    const FusedGroup& grp = fusion_.groups[std::size_t(st.group)];
    if (grp.flat) return;
    const std::int64_t bytes = ss.extent * grp.n * 4;
    for (std::size_t j = 0; j < grp.inputs.size(); ++j)
      if (ss.in_local[j] < 0 && grp.reads[j].step == grp.n && grp.reads[j].inner == 1)
        lines(static_cast<const char*>(st.in[j].data) + slice * bytes, bytes);
    return;
  }
  const std::size_t l = c.lead.size();
  for (std::size_t d = l, rem = std::size_t(slice); d-- > 0;) {
    idx[d] = std::int64_t(rem % std::size_t(c.lead[d]));
    rem /= std::size_t(c.lead[d]);
  }
  for (std::size_t j = 0; j < st.in.size(); ++j) {  // as run_chain finds the slice of input j
    if (ss.in_local[j] >= 0) continue;
    std::int64_t off = 0;
    bool moves = false;
    for (std::size_t d = 0; d < l; ++d) {
      off += idx[d] * ss.in_stride[j][d];
      moves = moves || ss.in_stride[j][d] != 0;
    }
    if (!moves) continue;
    const char* data = static_cast<const char*>(ss.in_from[j] >= 0 ? views_[std::size_t(ss.in_from[j])].data : st.in[j].data) + off * 4;
    const Shape& sh = ss.in_shape[j];
    const std::int64_t cols = sh.empty() ? 1 : sh.back(), total = numel(sh);
    const std::int64_t ld = j == 0 ? ss.ld_a : j == 1 ? ss.ld_b : 0;  // a matmul's operand read in place
    if (ld == 0 || cols == total) {
      lines(data, total * 4);
    } else {
      for (std::int64_t r = 0; r < total / cols; ++r) lines(data + r * ld * 4, cols * 4);
    }
  }
}

// Runs chain c slice-major: each thread takes whole slices through every step.
void Executor::run_chain(const SliceChain& c) {
  for (std::size_t t = c.first; t <= c.last; ++t) bind_inputs(steps_[t]);
  const std::size_t l = c.lead.size();
  parallel_for(c.slices, 1, [&](std::int64_t b, std::int64_t e) {
    char* const scratch = c.scratch_bytes > 0 ? chain_scratch(c.scratch_bytes) : nullptr;
    std::vector<View> ins, gin, gstored;
    std::vector<std::int64_t> idx(l);
    // Profiling: each step's time over this thread's slices, added to the chain's totals at
    // the end (a clock read between steps; none when not profiling).
    std::vector<double> spent(profile_ ? c.last - c.first + 1 : 0, 0.0);
    auto since = std::chrono::steady_clock::now();
    auto lap = [&](std::size_t t) {
      if (spent.empty()) return;
      const auto now = std::chrono::steady_clock::now();
      spent[t - c.first] += std::chrono::duration<double>(now - since).count();
      since = now;
    };
    std::vector<std::int64_t> next_idx(l);
    for (std::int64_t i = b; i < e; ++i) {
      for (std::size_t d = l, rem = std::size_t(i); d-- > 0;) {  // i's multi-index over L
        idx[d] = std::int64_t(rem % std::size_t(c.lead[d]));
        rem /= std::size_t(c.lead[d]);
      }
      for (std::size_t t = c.first; t <= c.last; ++t) {
        const Step& st = steps_[t];
        const SliceStep& ss = c.steps[t - c.first];
        if (i + 1 < e) prefetch_slice(c, t, i + 1, next_idx);
        if (skip_ && skipped(st, skip_, /*in_chain=*/true)) continue;  // (chains never run in anomaly mode)
        if (st.group >= 0) {
          const FusedGroup& grp = fusion_.groups[std::size_t(st.group)];
          if (!ss.any_local) {
            run_fused(grp, st.in, st.out, st.stored, i * ss.extent, (i + 1) * ss.extent, ss.rows.get());
            lap(t);
            continue;
          }
          // A local value's slice i sits at its scratch offset: the group, which indexes
          // whole tensors by row, gets a base that puts slice i there (only rows of slice
          // i are touched, and a value made in the chain starts with L, so slice i is the
          // range [i, i + 1) * its per-slice size).
          auto local = [&](View v, NodeId id, std::int64_t off) {
            if (off >= 0) v.data = scratch + off - i * (numel(g_.node(id).shape) / c.slices) * 4;
            return v;
          };
          gin.assign(st.in.begin(), st.in.end());
          for (std::size_t j = 0; j < gin.size(); ++j) gin[j] = local(gin[j], grp.inputs[j], ss.in_local[j]);
          gstored.assign(st.stored.begin(), st.stored.end());
          for (std::size_t j = 0; j < gstored.size(); ++j) gstored[j] = local(gstored[j], grp.stored[j], ss.stored_local[j]);
          run_fused(grp, gin, local(st.out, st.id, ss.out_local), gstored, i * ss.extent, (i + 1) * ss.extent,
                    ss.rows.get());
          lap(t);
          continue;
        }
        ins.clear();
        for (std::size_t j = 0; j < st.in.size(); ++j) {
          std::int64_t off = 0;
          for (std::size_t d = 0; d < l; ++d) off += idx[d] * ss.in_stride[j][d];
          char* data = ss.in_local[j] >= 0 ? scratch + ss.in_local[j]
                       : ss.in_from[j] >= 0 ? static_cast<char*>(views_[std::size_t(ss.in_from[j])].data) + off * 4
                                            : static_cast<char*>(st.in[j].data) + off * 4;
          ins.push_back(View{data, &ss.in_shape[j], st.in[j].dtype});
        }
        char* out_data = ss.out_local >= 0 ? scratch + ss.out_local : static_cast<char*>(st.out.data) + i * ss.out_elems * 4;
        if (ss.out_to >= 0) {
          std::int64_t off = 0;
          for (std::size_t d = 0; d < l; ++d) off += idx[d] * ss.out_stride[d];
          out_data = static_cast<char*>(views_[std::size_t(ss.out_to)].data) + off * 4;
        }
        const View out{out_data, &ss.out_shape, st.out.dtype};
        if (ss.masked || ss.strided)
          slice_matmul(g_.node(st.id), ss.masked.get(), ins, out, {ss.ld_a, ss.ld_b, ss.ld_c});
        else
          st.kernel(KernelArgs{g_.node(st.id), ins, out, &rng_});
        lap(t);
      }
    }
    if (!spent.empty()) {
      const std::lock_guard<std::mutex> lock(chain_profile_mu_);
      for (std::size_t t = c.first; t <= c.last; ++t) chain_step_seconds_[t] += spent[t - c.first];
    }
  });
}

// One step per computed node, in order: its kernel and its output view; a fused group is
// one step, where its root was.
void Executor::make_steps() {
  for (NodeId id : order_) {
    const Node& n = g_.node(id);
    if (op_bound_leaf(n.op)) continue;
    const int group = group_at(id);
    if (group >= 0 && fusion_.groups[std::size_t(group)].root != id) continue;  // inside its group's step
    Step st{id, group >= 0 ? nullptr : op_rule(n.op).kernel, group, {}, views_[std::size_t(id)], {}, {}};
    st.in_place = in_place_step_[std::size_t(id)] != 0;
    GG_CHECK(st.kernel != nullptr || group >= 0);
    if (group >= 0)
      for (NodeId m : fusion_.groups[std::size_t(group)].stored) st.stored.push_back(views_[std::size_t(m)]);
    steps_.push_back(std::move(st));
  }
}

bool Executor::never_stored(NodeId id) const {
  const int gi = group_at(id);
  if (gi < 0) return false;
  const FusedGroup& grp = fusion_.groups[std::size_t(gi)];
  return grp.root != id && std::find(grp.stored.begin(), grp.stored.end(), id) == grp.stored.end();
}

const std::vector<NodeId>& Executor::reads(const Step& st) const {
  return st.group >= 0 ? fusion_.groups[std::size_t(st.group)].inputs : g_.node(st.id).inputs;
}

// Checks the outputs, then simplifies what they need, or (off) maps every id to itself;
// then (on) rematerializes.
Simplified Executor::prepare(const Graph& g, const std::vector<NodeId>& outputs, const ExecutorOptions& options) {
  for (NodeId o : outputs)
    if (o < 0 || o >= g.size())
      throw GraphError(fmt::format("Executor: output %{} is not a node of this graph (it has {} nodes); was it built "
                                   "in another graph?", o, g.size()));
  Simplified s;
  if (options.simplify) {
    s = gg::simplify(g, outputs, {.keep_stop_gradient = false});
  } else {
    s.map.resize(std::size_t(g.size()));
    for (NodeId i = 0; i < g.size(); ++i) s.map[std::size_t(i)] = i;
    s.roots = outputs;
  }
  if (options.remat) {  // then the copies: the map goes through both passes
    Rematerialized r = gg::rematerialize(options.simplify ? s.graph : g, s.roots);
    for (NodeId& m : s.map)
      if (m >= 0) m = r.map[std::size_t(m)];
    s.graph = std::move(r.graph);
    s.roots = std::move(r.roots);
  }
  return s;
}

NodeId Executor::planned_id(NodeId user_id) const {
  return user_id < 0 || std::size_t(user_id) >= simplified_.map.size() ? NodeId(-1) : simplified_.map[std::size_t(user_id)];
}

// Liveness and offsets: every intermediate gets a place in one arena, reused once the
// last reader of the value has run; a reshape shares its input's buffer (`root`).
void Executor::plan_memory(std::vector<std::size_t>& offset, std::vector<NodeId>& root) {
  const Graph& g = g_;
  const std::size_t N = std::size_t(g.size());
  views_.assign(N, View{});
  kept_.assign(N, 0);
  inputs_.resize(N);
  input_fed_.assign(N, 0);

  // Liveness: the last step that reads each node; outputs live to the end. A member of a
  // fused group reads its operands when the group runs, at its root's place; the members
  // but the root and the stored ones are never stored. A stored member takes its place
  // where it is in the order (before the group runs: a little early, never late).
  auto interior = [&](NodeId id) { return never_stored(id); };
  auto runs_at = [&](std::size_t s) {
    const int gi = group_at(order_[s]);
    return gi < 0 ? int(s) : step_of_[std::size_t(fusion_.groups[std::size_t(gi)].root)];
  };
  std::vector<int> last_use(N, -1);
  for (std::size_t s = 0; s < order_.size(); ++s)
    for (NodeId in : g.node(order_[s]).inputs)
      last_use[std::size_t(in)] = std::max(last_use[std::size_t(in)], runs_at(s));
  // A product with an epilogue group still reads its operands while the group writes:
  // they stay until the group's place (plan_epilogues).
  for (std::size_t s = 0; s < order_.size(); ++s)
    if (const NodeId r = epilogue_for_[std::size_t(order_[s])]; r >= 0)
      for (NodeId in : g.node(order_[s]).inputs)
        last_use[std::size_t(in)] = std::max(last_use[std::size_t(in)], step_of_[std::size_t(r)]);
  // A chain runs its steps slice by slice: what any of them reads stays until its end.
  for (const SliceChain& c : chains_)
    for (std::size_t s = c.first; s <= c.last; ++s)
      for (NodeId in : g.node(order_[s]).inputs) last_use[std::size_t(in)] = std::max(last_use[std::size_t(in)], int(c.last));
  // A permute read in place: the chains read its input instead, until its last reader.
  // A permute written in place: the chain that writes it needs its place from its start.
  std::vector<std::vector<NodeId>> early(order_.size());  // by position: values placed there
  std::vector<char> placed_early(N, 0);
  for (std::size_t s = 0; s < order_.size(); ++s) {
    const InPlace& ip = in_place_[std::size_t(order_[s])];
    if (ip.to < 0) continue;
    if (!ip.writes) {
      last_use[std::size_t(ip.to)] = std::max(last_use[std::size_t(ip.to)], last_use[std::size_t(order_[s])]);
      continue;
    }
    for (const SliceChain& c : chains_)
      if (s >= c.first && s <= c.last) {
        early[c.first].push_back(ip.to);
        placed_early[std::size_t(ip.to)] = 1;
      }
  }
  for (NodeId o : outputs_) {
    last_use[std::size_t(o)] = INT_MAX;
    kept_[std::size_t(o)] = 1;
  }
  // A reshape is a view: it shares its input's buffer (except a parameter's, which is
  // rebound at each run), and that buffer lives as long as its last view is read.
  root.assign(N, -1);
  for (NodeId id : order_) {
    const Node& n = g.node(id);
    root[std::size_t(id)] = id;
    if (n.op == OpKind::reshape && g.node(n.inputs[0]).op != OpKind::param)
      root[std::size_t(id)] = root[std::size_t(n.inputs[0])];
  }
  for (std::size_t s = order_.size(); s-- > 0;) {
    const std::size_t id = std::size_t(order_[s]), r = std::size_t(root[id]);
    if (r != id) last_use[r] = std::max({last_use[r], last_use[id], int(s)});
  }

  // Offsets: first fit among the blocks still alive at each step: the lowest free gap that
  // holds the value, else the top of the arena. Blocks expire after their last reader; the
  // free gaps below the top are kept ordered by offset, with a multiset of their sizes, so a
  // step costs O(log n) plus the gaps it looks at (planning time grows about linearly with
  // the model's depth).
  std::map<std::size_t, std::size_t> gaps;  // offset -> end, free, below top
  std::multiset<std::size_t> gap_sizes;
  std::map<std::size_t, std::size_t> blocks;  // offset -> end, live
  std::size_t top = 0;
  std::vector<std::vector<std::size_t>> expiring(order_.size());  // by last step: block offsets
  auto add_gap = [&](std::size_t off, std::size_t end) {
    gaps.emplace(off, end);
    gap_sizes.insert(end - off);
  };
  auto remove_gap = [&](std::map<std::size_t, std::size_t>::iterator it) {
    gap_sizes.erase(gap_sizes.find(it->second - it->first));
    return gaps.erase(it);
  };
  auto release = [&](std::size_t off) {
    auto b = blocks.find(off);
    std::size_t lo = b->first, hi = b->second;
    blocks.erase(b);
    // Merge with the free gaps on either side.
    if (auto next = gaps.find(hi); next != gaps.end()) {
      hi = next->second;
      remove_gap(next);
    }
    if (auto after = gaps.lower_bound(lo); after != gaps.begin()) {
      auto prev = std::prev(after);
      if (prev->second == lo) {
        lo = prev->first;
        remove_gap(prev);
      }
    }
    if (hi >= top) {
      top = lo;  // the freed space was at the top: the top comes down instead
      return;
    }
    add_gap(lo, hi);
  };
  offset.assign(N, 0);
  std::size_t expired_to = 0;  // buckets below this step are released
  auto place = [&](std::size_t s, NodeId id) {
    const Node& n = g.node(id);
    const std::size_t size = round64(std::size_t(numel(n.shape)) * 4);
    if (size == 0) return;  // an empty value needs no place (its offset stays 0)
    std::size_t at = top;
    if (!gap_sizes.empty() && *gap_sizes.rbegin() >= size)
      for (auto it = gaps.begin(); it != gaps.end(); ++it)
        if (it->second - it->first >= size) {
          at = it->first;
          const std::size_t end = it->second;
          remove_gap(it);
          if (at + size < end) add_gap(at + size, end);
          break;
        }
    if (at == top) top += size;
    offset[std::size_t(id)] = at;
    blocks.emplace(at, at + size);
    const int last = std::max(last_use[std::size_t(id)], int(s));
    if (last != INT_MAX && std::size_t(last) < expiring.size()) expiring[std::size_t(last)].push_back(at);
    arena_bytes_ = std::max(arena_bytes_, at + size);
    unshared_bytes_ += size;
  };
  for (std::size_t s = 0; s < order_.size(); ++s) {
    const NodeId id = order_[s];
    const Node& n = g.node(id);
    const bool own = !op_bound_leaf(n.op) && root[std::size_t(id)] == id && !interior(id) &&
                     local_off_[std::size_t(id)] < 0 && in_place_[std::size_t(id)].to < 0 && !placed_early[std::size_t(id)];
    if (!own && early[s].empty()) continue;
    for (; expired_to < s; ++expired_to)
      for (std::size_t off : expiring[expired_to]) release(off);
    for (NodeId e : early[s]) place(s, e);
    if (own) place(s, id);
  }
  if (arena_bytes_ > physical_memory_bytes())
    throw GraphError(fmt::format("the plan needs {:.1f} GiB for intermediate values, more than this machine's {:.1f} GiB "
                                 "of memory (is the model or batch too large?)",
                                 double(arena_bytes_) / (1 << 30), double(physical_memory_bytes()) / (1 << 30)));
  arena_.reset(aligned_alloc_large(arena_bytes_));
  std::memset(arena_.get(), 0, std::max<std::size_t>(arena_bytes_, 1));
}

// Views: where each planned node's value lives (the arena, the node's constant data, an
// input buffer, or a parameter bound at each run).
void Executor::bind_views(const std::vector<std::size_t>& offset, const std::vector<NodeId>& root) {
  char* base = static_cast<char*>(arena_.get());
  for (NodeId id : order_) {
    const Node& n = g_.node(id);
    View& v = views_[std::size_t(id)];
    v.shape = &n.shape;
    v.dtype = n.dtype;
    if (n.op == OpKind::input) {
      inputs_[std::size_t(id)] = Tensor(n.shape, n.dtype);
      v.data = inputs_[std::size_t(id)].data();
      kept_[std::size_t(id)] = 1;
    } else if (n.op == OpKind::constant) {
      v.data = const_cast<float*>(n.attrs.data->data());  // i32 constants are converted below
      if (n.dtype == DType::i32) {
        Tensor t(n.shape, DType::i32);
        for (std::int64_t i = 0; i < t.numel(); ++i) t.i()[i] = std::int32_t((*n.attrs.data)[std::size_t(i)]);
        inputs_[std::size_t(id)] = std::move(t);
        v.data = inputs_[std::size_t(id)].data();
      }
      kept_[std::size_t(id)] = 1;
    } else if (n.op == OpKind::param) {
      kept_[std::size_t(id)] = 1;  // bound at each run
    } else if (root[std::size_t(id)] != id) {
      v.data = views_[std::size_t(root[std::size_t(id)])].data;  // a view: the reshape kernel copies nothing
    } else if (never_stored(id) || local_off_[std::size_t(id)] >= 0 || in_place_[std::size_t(id)].to >= 0) {
      v.data = nullptr;  // inside a fused group, in a chain's scratch, or read or written in place: no place of its own
    } else {
      v.data = base + offset[std::size_t(id)];
    }
  }
}

// Each value check of a planned node runs after the step that computes it (leaves: first).
void Executor::plan_checks(const std::vector<int>& step_of, const std::vector<int>& step_index) {
  const auto& checks = g_.checks();
  for (std::size_t c = 0; c < checks.size(); ++c) {
    const std::size_t id = std::size_t(checks[c].node);
    if (step_of[id] < 0) continue;  // not in this plan
    if (step_index[id] >= 0) steps_[std::size_t(step_index[id])].checks.push_back(c);
    else leaf_checks_.push_back(c);
  }
}

void Executor::run_check(std::size_t c) const {
  const Graph::Check& ck = g_.checks()[c];
  View v = views_[std::size_t(ck.node)];
  std::string problem = ck.check(v);
  if (!problem.empty()) throw GraphError(fmt::format("{}: {}", ck.context, problem));
}

bool Executor::has_input(const std::string& name) const {
  for (NodeId id : order_)
    if (g_.node(id).op == OpKind::input && g_.node(id).name == name) return true;
  return false;
}

void Executor::feed(const std::string& name, const void* data, std::int64_t count, DType dtype, const Shape* shape) {
  for (NodeId id : order_) {
    const Node& n = g_.node(id);
    if (n.op != OpKind::input || n.name != name) continue;
    if ((shape ? *shape != n.shape : count != numel(n.shape)) || dtype != n.dtype)
      throw GraphError(fmt::format("input '{}' declared at {} as {}{} was fed {}", name, site_string(n.loc),
                                   to_string(n.dtype), to_string(n.shape),
                                   shape ? fmt::format("{}{}", to_string(dtype), to_string(*shape))
                                         : fmt::format("{} {} values", count, to_string(dtype))));
    std::memcpy(inputs_[std::size_t(id)].data(), data, std::size_t(count) * 4);
    input_fed_[std::size_t(id)] = 1;
    return;
  }
  std::vector<std::string> declared;
  for (const Node& n : user_g_.nodes()) {
    if (n.op != OpKind::input) continue;
    if (n.name == name)
      throw GraphError(fmt::format("input '{}' declared at {} is not used by the requested outputs of this plan; "
                                   "feed only the inputs it needs (has_input() tells)", name, site_string(n.loc)));
    declared.push_back(n.name);
  }
  throw GraphError(fmt::format("no input '{}' in this graph{}", name, did_you_mean(name, declared)));
}

void Executor::set_input(const std::string& name, const Tensor& t) {
  feed(name, t.data(), t.numel(), t.dtype(), &t.shape());
}
void Executor::set_input(const std::string& name, std::span<const float> values) {
  feed(name, values.data(), std::int64_t(values.size()), DType::f32, nullptr);
}
void Executor::set_input(const std::string& name, std::span<const std::int32_t> values) {
  feed(name, values.data(), std::int64_t(values.size()), DType::i32, nullptr);
}

void Executor::run() {
  // Bind parameters (the store may have replaced a tensor since the last run).
  for (NodeId id : order_) {
    const Node& n = g_.node(id);
    if (n.op == OpKind::input && !input_fed_[std::size_t(id)])
      throw GraphError(fmt::format("input '{}' declared at {} was not fed", n.name, site_string(n.loc)));
    if (n.op != OpKind::param) continue;
    if (!params_.has(n.name))
      throw GraphError(fmt::format("parameter '{}' declared at {} has no value", n.name, site_string(n.loc)));
    Tensor& t = params_.at(n.name);
    if (t.shape() != n.shape)
      throw GraphError(fmt::format("parameter '{}' is {} in the store but {} in the graph", n.name,
                                   to_string(t.shape()), to_string(n.shape)));
    views_[std::size_t(id)].data = t.data();
  }
  for (std::size_t c : leaf_checks_) run_check(c);
  if (profile_) {
    step_seconds_.resize(steps_.size(), 0.0);
    chain_step_seconds_.resize(steps_.size(), 0.0);
    ++profiled_runs_;
  }
  if (detect_anomaly_ && !chains_.empty()) bind_locals_unsliced();  // its chains run step by step
  const unsigned skip = detect_anomaly_ ? 0u : skip_;
  auto checks = [&](const Step& st) {  // value checks, not run while work is left out
    if (!skip)
      for (std::size_t c : st.checks) run_check(c);
  };
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    if (!chain_at_.empty() && chain_at_[t] >= 0 && !detect_anomaly_) {
      const SliceChain& c = chains_[std::size_t(chain_at_[t])];
      std::chrono::steady_clock::time_point t0{};
      if (profile_) t0 = std::chrono::steady_clock::now();
      run_chain(c);
      if (profile_) {
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        step_seconds_[t] += dt;
        sliced_seconds_ += dt;
        ++sliced_calls_;
        sliced_steps_ += std::int64_t(c.last - c.first + 1);
      }
      for (std::size_t u = c.first; u <= c.last; ++u) checks(steps_[u]);
      t = c.last;
      continue;
    }
    if ((steps_[t].in_place || by_epilogue_[t]) && !detect_anomaly_) {  // the chains or its product ran it
      checks(steps_[t]);
      continue;
    }
    Step* run_st = &steps_[t];
    if (skip && skipped(*run_st, skip, /*in_chain=*/false)) {
      // An epilogue whose product is left out runs alone, unless groups are left out too.
      if (epilogue_step_[t] < 0 || (skip & skip_groups)) continue;
      run_st = &steps_[std::size_t(epilogue_step_[t])];
    }
    Step& st = *run_st;
    const Node& n = g_.node(st.id);
    bind_inputs(st);
    auto compute = [&] {
      if (st.group >= 0) return run_fused(fusion_.groups[std::size_t(st.group)], st.in, st.out, st.stored);
      if (epilogue_step_[t] < 0 || detect_anomaly_ || (skip & skip_groups))
        return st.kernel(KernelArgs{n, st.in, st.out, &rng_});
      // The product with its epilogue: the group on each block of rows once it is final
      // (a flat group's values are the rows' values in order). Anomaly mode runs them apart.
      Step& es = steps_[std::size_t(epilogue_step_[t])];
      bind_inputs(es);
      const FusedGroup& grp = fusion_.groups[std::size_t(es.group)];
      const std::int64_t per_row = grp.flat ? n.shape.back() : 1;
      const GemmRowsDone rows_done = [&](std::int64_t r0, std::int64_t r1) {
        run_fused(grp, es.in, es.out, es.stored, r0 * per_row, r1 * per_row);
      };
      st.kernel(KernelArgs{n, st.in, st.out, &rng_, &rows_done});
    };
    if (!profile_) {
      compute();
      if (detect_anomaly_) check_anomaly(st);
      checks(st);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    compute();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    step_seconds_[std::size_t(&st - steps_.data())] += dt;
    if (st.group >= 0) {
      fused_seconds_ += dt;
      ++fused_calls_;
      fused_members_ += std::int64_t(fusion_.groups[std::size_t(st.group)].members.size());
    } else {
      op_seconds_[std::size_t(n.op)] += dt;
      ++op_calls_[std::size_t(n.op)];
    }
    if (detect_anomaly_) check_anomaly(st);
    checks(st);
  }
}

bool Executor::skipped(const Step& st, unsigned kinds, bool in_chain) const {
  const Node& n = g_.node(st.id);
  if (st.group >= 0) return kinds & (in_chain ? skip_chain_groups : skip_groups);
  if (n.op == OpKind::matmul) return kinds & (in_chain ? skip_chain_products : skip_products);
  return (kinds & skip_ops) && n.op != OpKind::reshape && !op_bound_leaf(n.op);
}

namespace {
struct ValueSummary {
  std::int64_t nan = 0, inf = 0;
  double lo = INFINITY, hi = -INFINITY;  // over the finite values
};
ValueSummary summarize(const View& v) {
  ValueSummary s;
  for (std::int64_t i = 0, n = v.numel(); i < n; ++i) {
    const double x = v.dtype == DType::i32 ? double(v.i()[i]) : double(v.f()[i]);
    if (std::isnan(x)) ++s.nan;
    else if (std::isinf(x)) ++s.inf;
    else {
      s.lo = std::min(s.lo, x);
      s.hi = std::max(s.hi, x);
    }
  }
  return s;
}
std::string describe_node(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return fmt::format("%{} {} {}{}{}", id, op_name(n.op), to_string(n.dtype), to_string(n.shape),
                     n.name.empty() ? std::string() : fmt::format(" '{}'", n.name));
}
}  // namespace

// "max, sub, exp, sum, div": a fused group's ops in execution order.
std::string Executor::group_ops(int group) const {
  std::string s;
  for (NodeId m : fusion_.groups[std::size_t(group)].members) s += (s.empty() ? "" : ", ") + std::string(op_name(g_.node(m).op));
  return s;
}

// A group's stored members, in execution order, then its root (or the step's one node).
void Executor::check_anomaly(const Step& st) const {
  if (st.group >= 0) {
    const std::vector<NodeId>& stored = fusion_.groups[std::size_t(st.group)].stored;
    for (std::size_t i = 0; i < stored.size(); ++i) check_value(st, stored[i], st.stored[i]);
  }
  check_value(st, st.id, st.out);
}

void Executor::check_value(const Step& st, NodeId id, const View& v) const {
  if (v.dtype != DType::f32) return;
  const ValueSummary out = summarize(v);
  if (out.nan == 0 && out.inf == 0) return;
  const Node& n = g_.node(id);
  const bool backward = n.name.rfind("grad(", 0) == 0;
  std::string ins;
  bool inf_in = false;
  const std::vector<NodeId>& read = reads(st);
  for (std::size_t i = 0; i < read.size(); ++i) {
    const ValueSummary s = summarize(st.in[i]);
    inf_in = inf_in || s.inf > 0;
    ins += fmt::format("; input {} {} at {}: {}, {} NaN, {} Inf", i, describe_node(g_, read[i]),
                       site_string(g_.node(read[i]).loc),
                       s.lo <= s.hi ? fmt::format("min {:.6g} max {:.6g}", s.lo, s.hi) : "no finite value", s.nan, s.inf);
  }
  // An infinity passed on from an input is not new (a mask's -inf flowing through where and
  // the max trick is by design); a NaN always is, and so is an infinity made here (overflow,
  // log of 0, division by 0).
  if (out.nan == 0 && inf_in) return;
  throw GraphError(fmt::format("{} at {} ('{}'): anomaly: the first non-finite value of this run: {} node %{} {}{} "
                               "holds {} NaN and {} Inf of {} values{}",
                               op_name(n.op), site_string(n.loc), n.name, backward ? "backward" : "forward", id,
                               to_string(n.dtype), to_string(n.shape), out.nan, out.inf, v.numel(),
                               st.group < 0 ? ins
                                            : fmt::format(" (the {} of a fused group of {} ops: {}; run with "
                                                          "GG_FUSE=0 to check each one){}",
                                                          id == st.id ? "root" : "stored member",
                                                          fusion_.groups[std::size_t(st.group)].members.size(),
                                                          group_ops(st.group), ins)));
}

std::string Executor::profile_report() const {
  std::vector<int> kinds;
  double total = 0;
  for (int k = 0; k < op_count; ++k)
    if (op_calls_[std::size_t(k)] > 0) {
      kinds.push_back(k);
      total += op_seconds_[std::size_t(k)];
    }
  std::sort(kinds.begin(), kinds.end(), [&](int a, int b) { return op_seconds_[std::size_t(a)] > op_seconds_[std::size_t(b)]; });
  std::string s = fmt::format("{:<12} {:>8} {:>10} {:>6}\n", "op", "calls", "total ms", "share");
  total += fused_seconds_ + sliced_seconds_;
  bool fused_listed = fused_calls_ == 0;
  auto fused_line = [&] {
    fused_listed = true;
    return fmt::format("{:<12} {:>8} {:>10.1f} {:>5.1f}%  ({:.1f} ops a group)\n", "fused", fused_calls_,
                       fused_seconds_ * 1e3, 100.0 * fused_seconds_ / std::max(total, 1e-12),
                       double(fused_members_) / double(std::max<std::int64_t>(fused_calls_, 1)));
  };
  for (int k : kinds) {
    if (!fused_listed && fused_seconds_ >= op_seconds_[std::size_t(k)]) s += fused_line();
    s += fmt::format("{:<12} {:>8} {:>10.1f} {:>5.1f}%\n", op_name(OpKind(k)), op_calls_[std::size_t(k)],
                     op_seconds_[std::size_t(k)] * 1e3, 100.0 * op_seconds_[std::size_t(k)] / std::max(total, 1e-12));
  }
  if (!fused_listed) s += fused_line();
  if (sliced_calls_ > 0)
    s += fmt::format("{:<12} {:>8} {:>10.1f} {:>5.1f}%  (batch-slice chains of {:.1f} steps, matmuls and groups inside)\n",
                     "sliced", sliced_calls_, sliced_seconds_ * 1e3, 100.0 * sliced_seconds_ / std::max(total, 1e-12),
                     double(sliced_steps_) / double(sliced_calls_));
  return s;
}

std::string Executor::profile_steps_report(int top) const {
  std::vector<std::size_t> idx(step_seconds_.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return step_seconds_[a] > step_seconds_[b]; });
  const double runs = double(std::max<std::int64_t>(profiled_runs_, 1));
  std::string s = fmt::format("{:>9} {:>7}  {}\n", "ms/run", "GFLOPS", "step");
  // "fused x7 [mul, where, ...]" for a group ("compiled x7" when it runs compiled), else the op's name
  auto label = [&](const Step& step) {
    if (step.group < 0) return std::string(op_name(g_.node(step.id).op));
    const FusedGroup& grp = fusion_.groups[std::size_t(step.group)];
    return fmt::format("{} x{} [{}]", grp.compiled >= 0 ? "compiled" : "fused", grp.members.size(), group_ops(step.group));
  };
  auto transposes = [&](const Node& m) { return fmt::format("{}{}", m.attrs.trans_a ? "T" : "N", m.attrs.trans_b ? "T" : "N"); };
  for (std::size_t r = 0; r < idx.size() && int(r) < top; ++r) {
    const Step& st = steps_[idx[r]];
    const Node& n = g_.node(st.id);
    const double ms = step_seconds_[idx[r]] / runs * 1e3;
    std::string ins;
    for (NodeId in : reads(st)) ins += (ins.empty() ? "" : ", ") + to_string(g_.node(in).shape);
    std::string what = label(st);
    // A product and its epilogue group: one time (the GFLOPS count the product's work only).
    const std::string epilogue = epilogue_step_[idx[r]] >= 0 && !detect_anomaly_
                                     ? " + epilogue " + label(steps_[std::size_t(epilogue_step_[idx[r]])])
                                     : "";
    if (!chain_at_.empty() && chain_at_[idx[r]] >= 0) {
      const SliceChain& c = chains_[std::size_t(chain_at_[idx[r]])];
      std::string inside;  // the chain's steps: "matmul NT, fused x7 [...], matmul NN"
      double chain_total = 0;
      for (std::size_t t = c.first; t <= c.last && t < chain_step_seconds_.size(); ++t) chain_total += chain_step_seconds_[t];
      for (std::size_t t = c.first; t <= c.last; ++t) {
        const Step& cs = steps_[t];
        const Node& cn = g_.node(cs.id);
        if (t != c.first) inside += ", ";
        inside += label(cs);
        if (cs.group < 0 && cn.op == OpKind::matmul) inside += fmt::format(" {}", transposes(cn));
        if (const auto& mb = c.steps[t - c.first].masked)
          inside += fmt::format(" masked {:.0f}%", 100.0 * mb->fraction);
        if (const auto& rl = c.steps[t - c.first].rows) inside += fmt::format(" rows {:.0f}%", 100.0 * rl->fraction);
        if (chain_total > 0) inside += fmt::format(": {:.0f}%", 100.0 * chain_step_seconds_[t] / chain_total);
      }
      what = fmt::format("sliced chain of {} steps over {} slices [{}{}], from {}", c.last - c.first + 1, c.slices, inside,
                         chain_total > 0 ? "; after each step its share of the chain's time" : "", what);
    }
    std::string gf = "";
    if (st.group < 0 && n.op == OpKind::matmul && (chain_at_.empty() || chain_at_[idx[r]] < 0)) {
      const Shape& a = g_.node(n.inputs[0]).shape;
      const double k = double(n.attrs.trans_a ? a[a.size() - 2] : a.back());
      gf = fmt::format("{:.1f}", 2.0 * double(numel(n.shape)) * k / (ms * 1e-3) * 1e-9);
    }
    s += fmt::format("{:>9.3f} {:>7}  {}{} {} <- {}{}{}\n", ms, gf, what,
                     n.op == OpKind::matmul ? fmt::format("[{}]", transposes(n)) : "",
                     to_string(n.shape), ins, n.name.empty() ? "" : fmt::format("  '{}'", n.name), epilogue);
  }
  return s;
}

View Executor::value(NodeId user_id) const {
  const NodeId id = planned_id(user_id);
  if (id < 0 || !kept_[std::size_t(id)])
    throw GraphError(fmt::format("node %{} is not an output of this plan; ask for it when building the executor", user_id));
  View v = views_[std::size_t(id)];
  if (g_.node(id).op == OpKind::param) v.data = const_cast<Tensor&>(params_.at(g_.node(id).name)).data();
  return v;
}

Tensor Executor::get(NodeId id) const {
  View v = value(id);
  Tensor t(*v.shape, v.dtype);
  std::memcpy(t.data(), v.data, std::size_t(t.numel()) * 4);
  return t;
}

}  // namespace gg
