// A persistent thread pool and parallel_for over an index range. Workers are started
// once and sleep between jobs; a call from inside a worker runs serially (no nesting).
#pragma once

#include <cstdint>
#include <functional>

namespace gg {

// Threads used by kernels (default: hardware concurrency, or GG_NUM_THREADS).
int num_threads();
// Sets the thread count (>= 1); takes effect for the next parallel_for.
void set_num_threads(int n);

// Calls body(begin, end) over disjoint chunks that cover [0, n), each at least `grain`
// long (except the last), possibly in parallel. Returns when all chunks are done.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace gg
