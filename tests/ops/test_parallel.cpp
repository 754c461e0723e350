// Tests for ops/cpu/parallel.cpp: parallel_for covers its range exactly once in contiguous
// chunks no shorter than the grain, at any thread count; a nested call runs serially on
// the calling thread; set_num_threads takes effect; chunks follow the threads' shares.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include "ops/cpu/parallel.h"

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

TEST_CASE("parallel_for splits a job by the threads' shares, and falls back to equal chunks") {
  const int saved = num_threads();
  set_num_threads(2);
  auto chunks_of = [](std::int64_t n, std::int64_t grain) {
    std::mutex mu;
    std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
    parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
      std::lock_guard<std::mutex> lk(mu);
      chunks.push_back({b, e});
    });
    std::sort(chunks.begin(), chunks.end());
    return chunks;
  };
  using Chunks = std::vector<std::pair<std::int64_t, std::int64_t>>;
  set_thread_shares({1, 3});  // thread 1 three quarters
  CHECK(thread_shares() == std::vector<double>{0.5, 1.5});
  CHECK(chunks_of(1000, 1) == Chunks{{0, 250}, {250, 1000}});
  CHECK(chunks_of(2, 1) == Chunks{{0, 1}, {1, 2}});          // every thread still gets one index
  CHECK(chunks_of(1000, 300) == Chunks{{0, 500}, {500, 1000}});  // 250 < grain: equal halves
  set_thread_shares({3, 1});
  CHECK(chunks_of(1000, 1) == Chunks{{0, 750}, {750, 1000}});
  set_thread_shares({1, 1});
  CHECK(chunks_of(7, 1) == Chunks{{0, 4}, {4, 7}});

  CHECK_THROWS_WITH(set_thread_shares({1}), "set_thread_shares: 1 shares for 2 threads (one a thread, or none to learn them)");
  CHECK_THROWS_WITH(set_thread_shares({1, 0}), "set_thread_shares: share 0 of thread 1 is not a positive finite number");
  CHECK_THROWS_WITH(set_thread_shares({std::nan(""), 1}), "set_thread_shares: share nan of thread 0 is not a positive finite number");

  // Learned shares: a job whose chunk takes thread 1 three times as long per index makes
  // thread 1's share fall (within [0.5, 1.5] of an equal one, mean 1).
  set_thread_shares({});
  for (int job = 0; job < 60; ++job)
    parallel_for(1000, 1, [](std::int64_t b, std::int64_t e) {
      const auto per_index = std::chrono::nanoseconds(b == 0 ? 100 : 300);
      const auto until = std::chrono::steady_clock::now() + per_index * (e - b);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
  const std::vector<double> learned = thread_shares();
  REQUIRE(learned.size() == 2);
  CHECK(learned[0] + learned[1] == doctest::Approx(2.0));
  CHECK(learned[1] < 0.8);
  CHECK(learned[1] >= 0.5 - 1e-9);
  set_num_threads(3);  // a new thread count starts again from equal shares
  CHECK(thread_shares() == std::vector<double>{1, 1, 1});
  set_num_threads(saved);
}
