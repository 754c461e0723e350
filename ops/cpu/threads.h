// Thread control, public: how many threads the kernels use, and parallel_for over an index
// range on gradgraph's persistent pool (workers are started once and sleep between jobs; a
// call from inside a worker runs serially, no nesting). What the CLI, the trainer and a
// user's own loops need; the pool's tuning (shares, spinning) stays inside ops. Implemented
// in ops/cpu/parallel.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace gg {

// Threads used by kernels (default: hardware concurrency, or GG_NUM_THREADS).
int num_threads();
// Sets the thread count (>= 1); takes effect for the next parallel_for.
void set_num_threads(int n);

// A reference to a callable that owns nothing and allocates nothing (std::function copies
// a lambda to the heap once it captures more than two words): for a callee that only calls
// it before returning, as parallel_for does with its body. The callable must outlive it, as
// a lambda written in the call's arguments does.
template <class Sig>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT: converts implicitly, as std::function does
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
        }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

// Calls body(begin, end) over disjoint contiguous chunks that cover [0, n) in order, one
// a thread, each at least `grain` long (except the last), possibly in parallel. Returns
// when all chunks are done. Where the chunks split depends on how the pool shares work
// among its threads: a body must give the same result for an index whichever chunk holds it.
void parallel_for(std::int64_t n, std::int64_t grain, FunctionRef<void(std::int64_t, std::int64_t)> body);

}  // namespace gg
