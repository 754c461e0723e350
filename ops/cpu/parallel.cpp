// The thread pool behind parallel_for: N-1 workers plus the calling thread, each job
// split into one contiguous chunk per thread so results do not depend on timing.
//
// Workers are pinned to CPUs other than the caller's (Linux). Without that, the kernel of a
// small VM woke the worker on the caller's CPU and never moved it: both halves of every
// job time-shared one CPU and 2 threads ran no faster than 1. The caller is not pinned; if
// it turns up on a worker's CPU, the workers are re-pinned around it.
//
// Hand-offs spin briefly before blocking. A worker that just finished a job polls for the
// next one for a short while, and the caller polls for the workers to finish, before either
// sleeps on a condition variable. Sleeping is what makes a pool slow on small machines and
// VMs: a wake-up costs tens of microseconds (an IPI; a halted vCPU is rescheduled by the
// host), and the scheduler tends to put the woken worker on the waker's own CPU, where the
// two time-share for milliseconds until the load balancer moves one. A spinning worker is
// still running on its own CPU when the next job arrives. Which thread runs which chunk
// never depends on timing; only how long the hand-off takes does.
#include "ops/cpu/parallel.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include "ops/runtime/config.h"

namespace gg {
namespace {


// Polls ready() for up to `spin` before giving up; true if it became ready.
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds spin) {
  if (ready()) return true;
  if (spin.count() <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + spin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {  // ~64 pauses between clock reads
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

// How long a hand-off polls before sleeping (GG_SPIN_US overrides; 0 = always sleep).
std::chrono::microseconds spin_time() {
  return std::chrono::microseconds(env_config().spin_us);
}

class Pool {
 public:
  explicit Pool(int n) : spin_(spin_time()) { resize(n); }
  ~Pool() { stop_workers(); }

  int size() const { return size_; }

  void resize(int n) {
    n = std::max(1, n);
    if (n == size_) return;
    stop_workers();
    size_ = n;
    stopping_.store(false);
    const std::uint64_t start = generation_.load();
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, start] { work(i, start); });
    pinned_for_ = -2;
    pin_workers();
  }

  // Runs job(t) for t in [0, size) with thread t == 0 being the caller.
  void run(FunctionRef<void(int)> job) {
    pin_workers();
    job_.store(&job, std::memory_order_relaxed);
    pending_.store(size_ - 1, std::memory_order_relaxed);
    bool wake;
    {
      // Under mu_, so a worker that is about to sleep either sees the new generation or is
      // counted in sleepers_ (no lost wake-up). Spinning workers see it without the lock.
      std::lock_guard<std::mutex> lk(mu_);
      generation_.fetch_add(1, std::memory_order_release);
      wake = sleepers_ > 0;
    }
    if (wake) cv_.notify_all();
    in_worker = true;
    job(0);
    in_worker = false;
    auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(done, spin_)) {
      std::unique_lock<std::mutex> lk(mu_);
      done_cv_.wait(lk, done);
    }
    job_.store(nullptr, std::memory_order_relaxed);
  }

  static thread_local bool in_worker;

 private:
  void work(int index, std::uint64_t seen) {
    in_worker = true;
    for (;;) {
      auto ready = [&] {
        return stopping_.load(std::memory_order_acquire) ||
               generation_.load(std::memory_order_acquire) != seen;
      };
      if (!spin_until(ready, spin_)) {
        std::unique_lock<std::mutex> lk(mu_);
        ++sleepers_;
        cv_.wait(lk, ready);
        --sleepers_;
      }
      if (stopping_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      (*job_.load(std::memory_order_relaxed))(index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // The caller may be asleep on done_cv_; taking mu_ orders this notify after its
        // check of pending_ (no lost wake-up). Cheap when nobody waits.
        std::lock_guard<std::mutex> lk(mu_);
        done_cv_.notify_one();
      }
    }
  }

  // Pins worker i to the i-th allowed CPU other than the one the caller is running on, when
  // there are enough CPUs; re-pins only when the caller has moved since the last time.
  void pin_workers() {
#ifdef __linux__
    if (workers_.empty()) return;
    const int here = sched_getcpu();
    if (here == pinned_for_) return;
    pinned_for_ = here;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (here < 0 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (c != here && CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (cpus.size() < workers_.size()) return;  // more threads than CPUs: let the kernel place them
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[i], &one);
      pthread_setaffinity_np(workers_[i].native_handle(), sizeof one, &one);
    }
#endif
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  const std::chrono::microseconds spin_;
  int size_ = 0;
  int pinned_for_ = -2;  // the caller's CPU the workers were last pinned around
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  int sleepers_ = 0;  // workers blocked (or about to block) on cv_; guarded by mu_
  std::atomic<const FunctionRef<void(int)>*> job_{nullptr};
  std::atomic<int> pending_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
};

thread_local bool Pool::in_worker = false;

int default_threads() {
  if (const int n = env_config().num_threads; n >= 1) return n;
  return std::max(1, int(std::thread::hardware_concurrency()) / env_config().local_ranks);
}

std::mutex pool_mu;                  // held while a parallel job runs
std::atomic<int> wanted_threads{0};  // not under pool_mu: a job's body may ask for it

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

// How a job's range is split between the threads. Each chunk's result depends only on its
// own indices (every kernel writes each output element from one chunk, and a reduction over
// chunks folds them by chunk index, never by thread), so where a split falls never changes
// a bit, and it can follow the threads' speeds. On a VM one vCPU is often slower than the
// other for seconds at a time (host load, on either one): with equal halves the fast
// thread waited for the slow one at the end of every job. The split
// gives thread t a share of the range proportional to its speed, learned from the jobs
// themselves: after each job of at least min_learn_ns a thread, each thread's rate
// (indices a nanosecond) moves the shares a step (learn_rate) towards the rates'
// proportions. A thread's speed also depends on the job (whose cache holds its inputs, a
// product's column split against its row split), so shares are learned per kind of job,
// its (n, grain), which a plan repeats every step; a new kind starts from the shares
// learned over all jobs. Learned shares stay within [min_share, max_share] of an equal one.
// GG_SHARES=0 keeps equal chunks (the split before this); set_thread_shares fixes them.
constexpr int max_timed = 8;  // threads whose chunks are weighted; more share equally
class Shares {
 public:
  struct alignas(64) Slot {  // one cache line each: threads write theirs at the same moment
    std::int64_t ns = 0;
  };
  void resize(int threads) {  // a new thread count starts from equal shares, learning
    if (int(share_.size()) == threads) return;
    share_.assign(std::size_t(threads), 1.0);
    kinds_.clear();
    fixed_ = false;
  }
  void fix(std::vector<double> s) {  // empty: learn again from equal shares
    fixed_ = !s.empty();
    if (s.empty()) s.assign(share_.size(), 1.0);
    double total = 0;
    for (double v : s) total += v;
    for (double& v : s) v *= double(s.size()) / total;  // mean 1
    share_ = std::move(s);
    kinds_.clear();
  }
  const std::vector<double>& get() const { return share_; }
  // Fills start[0..threads] with the weighted split of a job of this kind and returns the
  // shares it used (for learn); null (start unset) when off or when a chunk other than the
  // last would be shorter than grain.
  std::vector<double>* split(std::int64_t n, std::int64_t grain, std::int64_t* start) {
    if (!enabled_ && !fixed_) return nullptr;
    std::vector<double>* use = &share_;
    if (!fixed_) {
      if (kinds_.size() >= max_kinds) kinds_.clear();  // bounded; relearned from share_
      const auto [it, fresh] = kinds_.try_emplace({n, grain}, share_);
      use = &it->second;
    }
    const std::vector<double>& sh = *use;
    const std::size_t T = sh.size();
    double total = 0;
    for (double v : sh) total += v;
    double acc = 0;
    start[0] = 0;
    for (std::size_t t = 0; t + 1 < T; ++t) {
      acc += sh[t];
      start[t + 1] = std::clamp<std::int64_t>(std::llround(double(n) * acc / total), start[t], n);
      if (start[t + 1] - start[t] < grain) return nullptr;
    }
    start[T] = n;
    return start[T] > start[T - 1] ? use : nullptr;
  }
  // Moves the shares `used` (and, for a kind's, the overall ones) towards the threads'
  // measured rates in the job just run.
  void learn(std::vector<double>* used, const std::int64_t* start, const Slot* took) {
    if (fixed_) return;
    const std::size_t T = share_.size();
    double rate[max_timed], mean = 0;
    for (std::size_t t = 0; t < T; ++t) {
      if (took[t].ns < min_learn_ns) return;  // too short to tell speed from hand-off time
      rate[t] = double(start[t + 1] - start[t]) / double(took[t].ns);
      mean += rate[t] / double(T);
    }
    step(*used, rate, mean);
    if (used != &share_) step(share_, rate, mean);
  }

 private:
  static void step(std::vector<double>& sh, const double* rate, double mean) {
    const std::size_t T = sh.size();
    double total = 0;
    for (std::size_t t = 0; t < T; ++t) {
      const double target = rate[t] / mean;  // 1 = as fast as the average thread
      sh[t] = std::clamp(sh[t] + learn_rate * (target - sh[t]), min_share, max_share);
      total += sh[t];
    }
    for (double& v : sh) v *= double(T) / total;  // mean 1
  }
  static constexpr std::int64_t min_learn_ns = 20000;
  static constexpr double learn_rate = 0.1, min_share = 0.5, max_share = 1.5;
  static constexpr std::size_t max_kinds = 4096;
  std::vector<double> share_;  // fixed, or learned over all jobs
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<double>> kinds_;  // (n, grain) -> learned shares
  bool fixed_ = false;
  bool enabled_ = env_config().shares;
};

Shares& shares() {  // used under pool_mu
  static Shares s;
  return s;
}

}  // namespace

int num_threads() {
  const int w = wanted_threads.load();
  return w > 0 ? w : pool().size();  // the pool is only resized once w > 0
}

void set_num_threads(int n) { wanted_threads.store(std::max(1, n)); }

void set_thread_shares(std::vector<double> s) {
  const int threads = num_threads();
  if (!s.empty() && std::ssize(s) != threads)
    throw std::invalid_argument(fmt::format("set_thread_shares: {} shares for {} threads (one a thread, or none to learn them)",
                                            s.size(), threads));
  for (std::size_t t = 0; t < s.size(); ++t)
    if (!(s[t] > 0) || !std::isfinite(s[t]))
      throw std::invalid_argument(fmt::format("set_thread_shares: share {} of thread {} is not a positive finite number", s[t], t));
  std::lock_guard<std::mutex> lk(pool_mu);
  shares().resize(threads);
  shares().fix(std::move(s));
}

std::vector<double> thread_shares() {
  std::lock_guard<std::mutex> lk(pool_mu);
  shares().resize(num_threads());
  return shares().get();
}

void parallel_for(std::int64_t n, std::int64_t grain, FunctionRef<void(std::int64_t, std::int64_t)> body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  if (Pool::in_worker) {  // nested: serial, before touching pool_mu (held by the outer job)
    body(0, n);
    return;
  }
  int threads = num_threads();
  std::int64_t chunks = std::min<std::int64_t>(threads, (n + grain - 1) / grain);
  if (chunks <= 1) {
    body(0, n);
    return;
  }
  std::lock_guard<std::mutex> lk(pool_mu);  // one parallel job at a time
  Pool& p = pool();
  p.resize(threads);
  Shares& sh = shares();
  sh.resize(threads);
  // Chunk t is [start[t], start[t + 1]). Weighted by the threads' measured speeds when every
  // thread has a chunk and every chunk but the last stays at least `grain` long; else equal.
  std::array<std::int64_t, max_timed + 1> start_small;
  std::vector<std::int64_t> start_big;
  std::int64_t* start = start_small.data();
  if (chunks > max_timed) {
    start_big.resize(std::size_t(chunks + 1));
    start = start_big.data();
  }
  std::vector<double>* used = chunks == threads && threads <= max_timed ? sh.split(n, grain, start) : nullptr;
  const bool timed = used != nullptr;
  if (!timed) {
    const std::int64_t per = (n + chunks - 1) / chunks;
    for (std::int64_t t = 0; t <= chunks; ++t) start[t] = std::min(n, t * per);
  }
  std::array<Shares::Slot, max_timed> took;
  p.run([&](int t) {
    if (t >= chunks || start[t] >= start[t + 1]) return;
    if (!timed) return body(start[t], start[t + 1]);
    const auto t0 = std::chrono::steady_clock::now();
    body(start[t], start[t + 1]);
    took[std::size_t(t)].ns = (std::chrono::steady_clock::now() - t0).count();
  });
  if (timed) sh.learn(used, start, took.data());
}

}  // namespace gg
