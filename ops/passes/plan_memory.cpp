// The memory pass: liveness and first-fit offsets of every intermediate value in one arena
// (a block is reused once its last reader has run), then each planned node's view.
#include "ops/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <iterator>
#include <map>
#include <set>

#include <unistd.h>

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
}  // namespace

// Liveness: the last step that reads each node; outputs live to the end. A member of a
// fused group reads its operands when the group runs, at its root's place; the members but
// the root and the stored ones are never stored. A stored member takes its place where it
// is in the order (before the group runs: a little early, never late).
std::vector<int> Executor::liveness(std::vector<NodeId>& root, std::vector<std::vector<NodeId>>& early,
                                    std::vector<char>& placed_early) {
  const Graph& g = g_;
  const std::size_t N = std::size_t(g.size());
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
  early.assign(order_.size(), {});
  placed_early.assign(N, 0);
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
  for (NodeId o : outputs_) last_use[std::size_t(o)] = INT_MAX;
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
  return last_use;
}

// Offsets: every intermediate gets a place in one arena (FirstFit), reused once the last
// reader of the value has run; a reshape shares its input's buffer (`root`).
void Executor::plan_memory(std::vector<std::size_t>& offset, std::vector<NodeId>& root) {
  const std::size_t N = std::size_t(g_.size());
  views_.assign(N, View{});
  kept_.assign(N, 0);
  inputs_.resize(N);
  input_fed_.assign(N, 0);
  for (NodeId o : outputs_) kept_[std::size_t(o)] = 1;
  std::vector<std::vector<NodeId>> early;
  std::vector<char> placed_early;
  const std::vector<int> last_use = liveness(root, early, placed_early);
  FirstFit arena;
  std::vector<std::vector<std::size_t>> expiring(order_.size());  // by last step: block offsets
  offset.assign(N, 0);
  std::size_t expired_to = 0;  // buckets below this step are released
  auto place = [&](std::size_t s, NodeId id) {
    const std::size_t size = round64(std::size_t(numel(g_.node(id).shape)) * 4);
    if (size == 0) return;  // an empty value needs no place (its offset stays 0)
    const std::size_t at = arena.place(size);
    offset[std::size_t(id)] = at;
    const int last = std::max(last_use[std::size_t(id)], int(s));
    if (last != INT_MAX && std::size_t(last) < expiring.size()) expiring[std::size_t(last)].push_back(at);
    arena_bytes_ = std::max(arena_bytes_, at + size);
    unshared_bytes_ += size;
  };
  for (std::size_t s = 0; s < order_.size(); ++s) {
    const NodeId id = order_[s];
    const bool own = !op_bound_leaf(g_.node(id).op) && root[std::size_t(id)] == id && !never_stored(id) &&
                     local_off_[std::size_t(id)] < 0 && in_place_[std::size_t(id)].to < 0 && !placed_early[std::size_t(id)];
    if (!own && early[s].empty()) continue;
    for (; expired_to < s; ++expired_to)
      for (std::size_t off : expiring[expired_to]) arena.release(off);
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

}  // namespace gg
