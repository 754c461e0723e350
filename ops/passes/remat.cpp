// The rematerialization pass. Positions are node ids (the graph is in topological id
// order, and the executor runs it in that order). For each large element-wise node, its
// readers are split at the widest gap between consecutive readers; if that gap is wide
// enough, the readers after it are late. The node is copied for them when each of its
// inputs is alive at the first late reader anyway (a leaf, or a value read at or after
// that point, or up to RematOptions::extend nodes before it, then kept alive that long),
// or can be copied there the same way (up to RematOptions::max_depth). A cheap node (one
// full-size input, alive at every late reader, which are all element-wise) gets a copy
// right before each late reader instead, run inside that reader's fused group; the others
// get one copy, shared. A second walk emits the graph with every copy placed right before
// the node it was made for.
#include "ops/passes/remat.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string_view>


namespace gg {
namespace {

struct Planner {
  const Graph& g;
  const RematOptions& o;
  std::vector<std::vector<NodeId>> readers;  // per node: distinct readers, increasing
  std::vector<char> kept;
  std::vector<NodeId> last_use;    // INT_MAX when kept
  std::vector<NodeId> first_late;  // per remat node: its first late reader
  std::vector<char> remat;         // late readers read the copy
  std::vector<char> per_reader;    // per remat node: a copy before each late reader (else one, shared)
  std::vector<std::vector<NodeId>> places;  // per copied node: the nodes its copies are emitted before

  Planner(const Graph& graph, const RematOptions& options) : g(graph), o(options) {
    const std::size_t N = std::size_t(g.size());
    readers.resize(N);
    for (NodeId id = 0; id < g.size(); ++id) {
      const auto& in = g.node(id).inputs;
      for (std::size_t i = 0; i < in.size(); ++i)
        if (std::find(in.begin(), in.begin() + std::ptrdiff_t(i), in[i]) == in.begin() + std::ptrdiff_t(i))
          readers[std::size_t(in[i])].push_back(id);
    }
    kept.assign(N, 0);
    last_use.assign(N, 0);
    first_late.assign(N, -1);
    remat.assign(N, 0);
    per_reader.assign(N, 0);
    places.resize(N);
  }

  bool copyable(NodeId v) const {
    const Node& n = g.node(v);
    return op_elementwise(n.op) && n.dtype == DType::f32 && !kept[std::size_t(v)];
  }

  // Node u at position p. As a Need: a copy of u emitted before p. As an Extend: u's
  // original kept alive until p.
  struct At {
    NodeId u, p;
  };
  using Need = At;
  using Extend = At;

  // Whether u's value can be had at position p: it is a leaf, its original is still
  // alive there (and not handed over to a copy), or only just dead (it is then kept alive
  // a few nodes longer, up to RematOptions::extend), or a copy is there, or it can be copied
  // there. Copies and extensions needed are appended to `need` and `extend` (not yet
  // committed).
  bool available(NodeId u, NodeId p, int depth, std::vector<Need>& need, std::vector<Extend>& extend) const {
    const Node& n = g.node(u);
    if (op_bound_leaf(n.op)) return true;
    const NodeId last = last_use[std::size_t(u)];
    if (!remat[std::size_t(u)] && last >= p) return true;
    if (!remat[std::size_t(u)] && p - last <= o.extend) {
      extend.push_back({u, p});
      return true;
    }
    const auto& pl = places[std::size_t(u)];
    if (std::find(pl.begin(), pl.end(), p) != pl.end()) return true;            // a copy right there
    if (!per_reader[std::size_t(u)] && !pl.empty() && pl.front() <= p) return true;  // a shared copy, alive from before p
    for (const Need& q : need)
      if (q.u == u && q.p == p) return true;
    if (depth >= o.max_depth || !copyable(u)) return false;
    for (NodeId in : n.inputs)
      if (!available(in, p, depth + 1, need, extend)) return false;
    need.push_back({u, p});
    return true;
  }

  // Whether v's copy may be made before each of its late readers instead of once: every
  // late reader is element-wise (the copy runs inside its fused group, never stored), v's
  // inputs are there at every late reader without other copies, and at most one of them is
  // as large as v (a copy per reader then reads no more than the shared copy's readers
  // would, and writes nothing).
  bool cheap_per_reader(NodeId v, std::size_t split, std::vector<Extend>& extend) const {
    const Node& n = g.node(v);
    int full = 0;
    for (NodeId in : n.inputs) full += numel(g.node(in).shape) == numel(n.shape) && !op_bound_leaf(g.node(in).op);
    if (full > 1) return false;
    const auto& rd = readers[std::size_t(v)];
    for (std::size_t i = split; i < rd.size(); ++i) {
      if (!op_elementwise(g.node(rd[i]).op)) return false;  // a copy it would read from memory anyway
      std::vector<Need> need;
      for (NodeId in : n.inputs)
        if (!available(in, rd[i], 1, need, extend) || !need.empty()) return false;
    }
    return true;
  }

  void commit(const std::vector<Need>& need, const std::vector<Extend>& extend) {
    for (const Extend& x : extend) last_use[std::size_t(x.u)] = std::max(last_use[std::size_t(x.u)], x.p);
    for (const Need& q : need) add_place(q.u, q.p);
  }
  void add_place(NodeId u, NodeId p) {
    auto& pl = places[std::size_t(u)];
    if (!per_reader[std::size_t(u)]) {  // one shared copy, at the earliest place
      if (pl.empty()) pl.push_back(p);
      else pl[0] = std::min(pl[0], p);
    } else if (std::find(pl.begin(), pl.end(), p) == pl.end()) {
      pl.insert(std::upper_bound(pl.begin(), pl.end(), p), p);
    }
  }

  void plan(const std::vector<NodeId>& roots) {
    for (NodeId r : roots) kept[std::size_t(r)] = 1;
    for (const Graph::Check& c : g.checks()) kept[std::size_t(c.node)] = 1;
    for (NodeId v = 0; v < g.size(); ++v) {
      const auto& rd = readers[std::size_t(v)];
      last_use[std::size_t(v)] = kept[std::size_t(v)] ? INT_MAX : rd.empty() ? v : rd.back();
    }
    for (NodeId v = 0; v < g.size(); ++v) {
      if (!copyable(v) || numel(g.node(v).shape) < o.min_elements) continue;
      // Split the readers at the widest gap.
      const auto& rd = readers[std::size_t(v)];
      NodeId prev = v, widest = 0;
      std::size_t split = rd.size();
      for (std::size_t i = 0; i < rd.size(); ++i) {
        if (rd[i] - prev > widest) {
          widest = rd[i] - prev;
          split = i;
        }
        prev = rd[i];
      }
      if (split == rd.size() || widest < o.min_gap) continue;
      const NodeId p = rd[split];
      std::vector<Extend> extend;
      if (cheap_per_reader(v, split, extend)) {
        commit({}, extend);
        remat[std::size_t(v)] = 1;
        per_reader[std::size_t(v)] = 1;
        first_late[std::size_t(v)] = p;
        for (std::size_t i = split; i < rd.size(); ++i) add_place(v, rd[i]);
      } else {
        std::vector<Need> need;
        extend.clear();
        bool ok = true;
        for (NodeId in : g.node(v).inputs) ok = ok && available(in, p, 1, need, extend);
        if (!ok) continue;
        commit(need, extend);
        remat[std::size_t(v)] = 1;
        first_late[std::size_t(v)] = p;
        add_place(v, p);
      }
      last_use[std::size_t(v)] = split > 0 ? rd[split - 1] : v;  // the original now dies after its early readers
    }
  }
};

}  // namespace


Rematerialized rematerialize(const Graph& g, const std::vector<NodeId>& roots, const RematOptions& options) {
  for (NodeId r : roots)
    if (r < 0 || r >= g.size())
      throw GraphError(fmt::format("rematerialize: root %{} is not a node of this graph (it has {} nodes)", r, g.size()));
  Planner pl(g, options);
  pl.plan(roots);

  const std::size_t N = std::size_t(g.size());
  std::vector<std::vector<NodeId>> before(N);  // per node: the copies emitted right before it
  for (NodeId v = 0; v < g.size(); ++v)  // increasing v: each list in increasing ids
    for (NodeId p : pl.places[std::size_t(v)]) before[std::size_t(p)].push_back(v);

  Rematerialized r;
  r.map.assign(N, -1);
  std::vector<NodeId> copy(N, -1);
  auto emit = [&](NodeId src, std::vector<NodeId> ins) {
    const Node& n = g.node(src);
    const NodeId m = r.graph.add(n.op, std::move(ins), n.attrs, n.name, n.loc);
    r.graph.set_site(m, n.loc, n.inner_loc);
    return m;
  };
  for (NodeId id = 0; id < g.size(); ++id) {
    for (NodeId v : before[std::size_t(id)]) {  // increasing ids: a copy's copied inputs come first
      std::vector<NodeId> ins;
      for (NodeId u : g.node(v).inputs) ins.push_back(copy[std::size_t(u)] >= 0 ? copy[std::size_t(u)] : r.map[std::size_t(u)]);
      copy[std::size_t(v)] = emit(v, std::move(ins));
      ++r.stats.copied;
    }
    // An original whose readers all moved to its copy is dropped.
    if (pl.remat[std::size_t(id)] && pl.readers[std::size_t(id)].front() >= pl.first_late[std::size_t(id)]) {
      ++r.stats.moved;
      continue;
    }
    std::vector<NodeId> ins;
    for (NodeId u : g.node(id).inputs) {
      const bool late = pl.remat[std::size_t(u)] && id >= pl.first_late[std::size_t(u)];
      ins.push_back(late ? copy[std::size_t(u)] : r.map[std::size_t(u)]);
    }
    r.map[std::size_t(id)] = emit(id, std::move(ins));
  }
  for (NodeId root : roots) r.roots.push_back(r.map[std::size_t(root)]);
  for (const Graph::Check& c : g.checks())
    if (r.map[std::size_t(c.node)] >= 0) r.graph.add_check(r.map[std::size_t(c.node)], c.context, c.check);
  return r;
}

}  // namespace gg
