// Tests for ops/parallel.cpp: parallel_for covers its range exactly once in contiguous
// chunks no shorter than the grain, at any thread count; a nested call runs serially on
// the calling thread; set_num_threads takes effect.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "ops/parallel.h"

using namespace gg;

TEST_CASE("parallel_for covers [0, n) exactly once, in chunks of at least the grain") {
  const int saved = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CHECK(num_threads() == threads);
    for (std::int64_t n : {0, 1, 7, 64, 1000}) {
      for (std::int64_t grain : {1, 16, 5000}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(grain);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::mutex mu;
        std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
        parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) hits[std::size_t(i)]++;
          std::lock_guard<std::mutex> lk(mu);
          chunks.push_back({b, e});
        });
        for (auto& h : hits) CHECK(h.load() == 1);
        CHECK(std::int64_t(chunks.size()) <= std::max<std::int64_t>(1, threads));
        if (n > 0 && chunks.size() > 1)
          for (auto [b, e] : chunks) CHECK((e - b >= grain || e == n));
      }
    }
  }
  set_num_threads(saved);
}

TEST_CASE("a parallel_for inside a parallel_for runs serially on the worker's thread") {
  const int saved = num_threads();
  set_num_threads(2);
  std::atomic<int> inner_chunks{0}, mismatched{0};
  parallel_for(2, 1, [&](std::int64_t, std::int64_t) {
    const auto outer = std::this_thread::get_id();
    parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) {
      ++inner_chunks;
      if (std::this_thread::get_id() != outer || b != 0 || e != 100) ++mismatched;
    });
  });
  CHECK(inner_chunks.load() == 2);  // one serial chunk per outer chunk
  CHECK(mismatched.load() == 0);
  set_num_threads(saved);
}
