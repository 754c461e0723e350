// The memory pass: liveness and first-fit offsets of every intermediate value in one arena
// (a block is reused once its last reader has run).
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <iterator>
#include <map>
#include <set>

#include <unistd.h>

#include "ops/passes/plan.h"
#include "ops/passes/plan_util.h"

namespace gg {

namespace {
std::size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : SIZE_MAX;
}

// First fit among the blocks still alive: the lowest free gap that holds a value, else the
// top of the arena. The free gaps below the top are kept ordered by offset, with a multiset
// of their sizes, so a placement costs O(log n) plus the gaps it looks at (planning time
// grows about linearly with the model's depth).
class FirstFit {
 public:
  // The offset of a new block of `size` bytes.
  std::size_t place(std::size_t size) {
    std::size_t at = top_;
    if (!gap_sizes_.empty() && *gap_sizes_.rbegin() >= size)
      for (auto it = gaps_.begin(); it != gaps_.end(); ++it)
        if (it->second - it->first >= size) {
          at = it->first;
          const std::size_t end = it->second;
          remove_gap(it);
          if (at + size < end) add_gap(at + size, end);
          break;
        }
    if (at == top_) top_ += size;
    blocks_.emplace(at, at + size);
    return at;
  }
  // Frees the block at `off`, merged with the free gaps on either side.
  void release(std::size_t off) {
    auto b = blocks_.find(off);
    std::size_t lo = b->first, hi = b->second;
    blocks_.erase(b);
    if (auto next = gaps_.find(hi); next != gaps_.end()) {
      hi = next->second;
      remove_gap(next);
    }
    if (auto after = gaps_.lower_bound(lo); after != gaps_.begin()) {
      auto prev = std::prev(after);
      if (prev->second == lo) {
        lo = prev->first;
        remove_gap(prev);
      }
    }
    if (hi >= top_) {
      top_ = lo;  // the freed space was at the top: the top comes down instead
      return;
    }
    add_gap(lo, hi);
  }

 private:
  void add_gap(std::size_t off, std::size_t end) {
    gaps_.emplace(off, end);
    gap_sizes_.insert(end - off);
  }
  void remove_gap(std::map<std::size_t, std::size_t>::iterator it) {
    gap_sizes_.erase(gap_sizes_.find(it->second - it->first));
    gaps_.erase(it);
  }
  std::map<std::size_t, std::size_t> gaps_;  // offset -> end, free, below top
  std::multiset<std::size_t> gap_sizes_;
  std::map<std::size_t, std::size_t> blocks_;  // offset -> end, live
  std::size_t top_ = 0;
};

// Liveness: the last step that reads each node; outputs live to the end. A member of a
// fused group reads its operands when the group runs, at its root's place; the members but
// the root and the stored ones are never stored. A stored member takes its place where it
// is in the order (before the group runs: a little early, never late).
std::vector<int> liveness(const Plan& p, std::vector<NodeId>& root, std::vector<std::vector<NodeId>>& early,
                          std::vector<char>& placed_early) {
  const Graph& g = p.g();
  const std::size_t N = std::size_t(g.size());
  auto runs_at = [&](std::size_t s) {
    const int gi = p.group_at(p.order[s]);
    return gi < 0 ? int(s) : p.step_of[std::size_t(p.fusion.groups[std::size_t(gi)].root)];
  };
  std::vector<int> last_use(N, -1);
  for (std::size_t s = 0; s < p.order.size(); ++s)
    for (NodeId in : g.node(p.order[s]).inputs)
      last_use[std::size_t(in)] = std::max(last_use[std::size_t(in)], runs_at(s));
  // A product with an epilogue group still reads its operands while the group writes:
  // they stay until the group's place (plan_epilogues).
  for (std::size_t s = 0; s < p.order.size(); ++s)
    if (const NodeId r = p.epilogue_for[std::size_t(p.order[s])]; r >= 0)
      for (NodeId in : g.node(p.order[s]).inputs)
        last_use[std::size_t(in)] = std::max(last_use[std::size_t(in)], p.step_of[std::size_t(r)]);
  // A chain runs its steps slice by slice: what any of them reads stays until its end.
  for (const ChainSpan& c : p.chains)
    for (std::size_t s = c.first; s <= c.last; ++s)
      for (NodeId in : g.node(p.order[s]).inputs) last_use[std::size_t(in)] = std::max(last_use[std::size_t(in)], int(c.last));
  // A permute read in place: the chains read its input instead, until its last reader.
  // A permute written in place: the chain that writes it needs its place from its start.
  early.assign(p.order.size(), {});
  placed_early.assign(N, 0);
  for (std::size_t s = 0; s < p.order.size(); ++s) {
    const InPlace& ip = p.in_place[std::size_t(p.order[s])];
    if (ip.to < 0) continue;
    if (!ip.writes) {
      last_use[std::size_t(ip.to)] = std::max(last_use[std::size_t(ip.to)], last_use[std::size_t(p.order[s])]);
      continue;
    }
    for (const ChainSpan& c : p.chains)
      if (s >= c.first && s <= c.last) {
        early[c.first].push_back(ip.to);
        placed_early[std::size_t(ip.to)] = 1;
      }
  }
  for (NodeId o : p.outputs) last_use[std::size_t(o)] = INT_MAX;
  // A reshape is a view: it shares its input's buffer (except a parameter's, which is
  // rebound at each run), and that buffer lives as long as its last view is read.
  root.assign(N, -1);
  for (NodeId id : p.order) {
    const Node& n = g.node(id);
    root[std::size_t(id)] = id;
    if (n.op == OpKind::reshape && g.node(n.inputs[0]).op != OpKind::param)
      root[std::size_t(id)] = root[std::size_t(n.inputs[0])];
  }
  for (std::size_t s = p.order.size(); s-- > 0;) {
    const std::size_t id = std::size_t(p.order[s]), r = std::size_t(root[id]);
    if (r != id) last_use[r] = std::max({last_use[r], last_use[id], int(s)});
  }
  return last_use;
}

}  // namespace

// Offsets: every intermediate gets a place in one arena (FirstFit), reused once the last
// reader of the value has run; a reshape shares its input's buffer (`root`).
Plan plan_memory(Plan p, const ExecutorOptions&) {
  const Graph& g = p.g();
  const std::size_t N = std::size_t(g.size());
  std::vector<std::size_t>& offset = p.offset;
  std::vector<NodeId>& root = p.root;
  p.arena_bytes = p.unshared_bytes = 0;
  std::vector<std::vector<NodeId>> early;
  std::vector<char> placed_early;
  const std::vector<int> last_use = liveness(p, root, early, placed_early);
  FirstFit arena;
  std::vector<std::vector<std::size_t>> expiring(p.order.size());  // by last step: block offsets
  offset.assign(N, 0);
  std::size_t expired_to = 0;  // buckets below this step are released
  auto place = [&](std::size_t s, NodeId id) {
    const std::size_t size = round64(std::size_t(numel(g.node(id).shape)) * 4);
    if (size == 0) return;  // an empty value needs no place (its offset stays 0)
    const std::size_t at = arena.place(size);
    offset[std::size_t(id)] = at;
    const int last = std::max(last_use[std::size_t(id)], int(s));
    if (last != INT_MAX && std::size_t(last) < expiring.size()) expiring[std::size_t(last)].push_back(at);
    p.arena_bytes = std::max(p.arena_bytes, at + size);
    p.unshared_bytes += size;
  };
  for (std::size_t s = 0; s < p.order.size(); ++s) {
    const NodeId id = p.order[s];
    const bool own = !op_bound_leaf(g.node(id).op) && root[std::size_t(id)] == id && !p.off_arena(id) &&
                     !placed_early[std::size_t(id)];
    if (!own && early[s].empty()) continue;
    for (; expired_to < s; ++expired_to)
      for (std::size_t off : expiring[expired_to]) arena.release(off);
    for (NodeId e : early[s]) place(s, e);
    if (own) place(s, id);
  }
  if (p.arena_bytes > physical_memory_bytes())
    throw GraphError(fmt::format("the plan needs {:.1f} GiB for intermediate values, more than this machine's {:.1f} GiB "
                                 "of memory (is the model or batch too large?)",
                                 double(p.arena_bytes) / (1 << 30), double(physical_memory_bytes()) / (1 << 30)));
  return p;
}

}  // namespace gg
