// A persistent thread pool and parallel_for over an index range. Workers are started
// once and sleep between jobs; a call from inside a worker runs serially (no nesting).
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace gg {

// One pause in a spin-wait loop (x86's `pause`; elsewhere a yield).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Threads used by kernels (default: hardware concurrency, or GG_NUM_THREADS).
int num_threads();
// Sets the thread count (>= 1); takes effect for the next parallel_for.
void set_num_threads(int n);

// Calls body(begin, end) over disjoint contiguous chunks that cover [0, n) in order, one
// a thread, each at least `grain` long (except the last), possibly in parallel. Returns
// when all chunks are done. Where the chunks split depends on the threads' shares (below):
// a body must give the same result for an index whichever chunk holds it.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

// parallel_for gives thread t a part of each job proportional to its share. The shares
// are learned from the threads' measured speeds, because on a shared machine one core is
// often slower than another for seconds at a time; results never depend on them.
// set_thread_shares(s) fixes them until the thread count changes: one positive finite
// number a thread (std::invalid_argument otherwise); an empty s goes back to learning.
void set_thread_shares(std::vector<double> shares);
// The shares in use, one a thread, scaled to a mean of 1.
std::vector<double> thread_shares();

}  // namespace gg
