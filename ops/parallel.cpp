// The thread pool behind parallel_for: N-1 workers plus the calling thread, each job
// split into one contiguous chunk per thread so results do not depend on timing.
#include "ops/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace gg {
namespace {

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop_workers(); }

  int size() const { return size_; }

  void resize(int n) {
    n = std::max(1, n);
    if (n == size_) return;
    stop_workers();
    size_ = n;
    stopping_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { work(i); });
  }

  // Runs job(t) for t in [0, size) with thread t == 0 being the caller.
  void run(const std::function<void(int)>& job) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &job;
      pending_ = size_ - 1;
      ++generation_;
    }
    cv_.notify_all();
    in_worker = true;
    job(0);
    in_worker = false;
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

  static thread_local bool in_worker;

 private:
  void work(int index) {
    in_worker = true;
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(index);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (--pending_ == 0) done_cv_.notify_one();
      }
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  int size_ = 0;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
};

thread_local bool Pool::in_worker = false;

int default_threads() {
  if (const char* s = std::getenv("GG_NUM_THREADS")) {
    int n = std::atoi(s);
    if (n >= 1) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::mutex pool_mu;                  // held while a parallel job runs
std::atomic<int> wanted_threads{0};  // not under pool_mu: a job's body may ask for it

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

int num_threads() {
  const int w = wanted_threads.load();
  return w > 0 ? w : pool().size();  // the pool is only resized once w > 0
}

void set_num_threads(int n) { wanted_threads.store(std::max(1, n)); }

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
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
  const std::int64_t per = (n + chunks - 1) / chunks;
  p.run([&](int t) {
    std::int64_t b = t * per, e = std::min(n, b + per);
    if (t < chunks && b < e) body(b, e);
  });
}

}  // namespace gg
