// The thread pool's kernel-side controls, beyond the public ops/cpu/threads.h (thread count,
// parallel_for): the spin-wait pause and the threads' shares of a job. Private to ops.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <thread>
#include <vector>

#include "threads.h"

namespace gg {

// One pause in a spin-wait loop (x86's `pause`; elsewhere a yield).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// parallel_for gives thread t a part of each job proportional to its share. The shares
// are learned from the threads' measured speeds, because on a shared machine one core is
// often slower than another for seconds at a time; results never depend on them.
// set_thread_shares(s) fixes them until the thread count changes: one positive finite
// number a thread (std::invalid_argument otherwise); an empty s goes back to learning.
void set_thread_shares(std::vector<double> shares);
// The shares in use, one a thread, scaled to a mean of 1.
std::vector<double> thread_shares();

}  // namespace gg
