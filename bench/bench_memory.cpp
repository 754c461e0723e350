// bench_memory: how fast the machine's cores read memory, alone and together, and what
// reading values another core wrote costs; run through gradgraph's own thread pool
// (ops/parallel.h), so the threads sit on the CPUs a training step's do.
//
// Usage: bench_memory
//
// Two tables, in GB/s:
// - reads: every thread sums its own buffer of the given size, first thread 0 alone, then
//   all threads at once (the figures per thread). Buffers that fit a core's L2 or the L3
//   should read as fast together as alone; from DRAM the threads share one bandwidth, so
//   a pass over values that left the caches gets no faster with a second thread.
// - hand-over: thread 0 writes a buffer, then thread 1 sums it (the values come from the
//   other core's cache), against thread 0 summing it again (its own cache); and thread 1
//   rewriting it over thread 0's lines against over its own.
// Best of a few repeats each. No timing assertion anywhere: a benchmark, not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "ops/parallel.h"

namespace {

using clk = std::chrono::steady_clock;

struct Free {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float, Free>;

Buf make(std::size_t floats) {
  const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  std::fill(p, p + floats, 1.f);
  return Buf(p);
}

volatile float sink;

// Sums n floats (n a multiple of 64) in 64 independent partial sums, which the compiler
// keeps in vector registers.
void read_all(const float* a, std::size_t n) {
  float s[64] = {};
  for (std::size_t i = 0; i < n; i += 64)
    for (std::size_t j = 0; j < 64; ++j) s[j] += a[i + j];
  float t = 0;
  for (float v : s) t += v;
  sink = t;
}

void write_all(float* a, std::size_t n, float v) { std::fill(a, a + n, v); }

double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

// Runs body(t) on every thread t at once, through the pool (thread t takes chunk t).
template <class F>
void on_threads(int threads, F body) {
  gg::parallel_for(threads, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) body(int(t));
  });
}

}  // namespace

int main() {
  const int T = std::max(1, gg::num_threads());
  gg::set_thread_shares(std::vector<double>(std::size_t(T), 1.0));  // chunk t on thread t, always
  fmt::print("bench_memory: {} threads (GG_NUM_THREADS), GB/s, best of repeats\n\n", T);

  fmt::print("reads: each thread sums its own buffer\n{:>10}  {:>12}  {}\n", "buffer", "thread 0 alone",
             "all threads at once (per thread)");
  for (std::size_t kib : {256u, 768u, 3072u, 12288u, 65536u}) {
    const std::size_t n = kib * 1024 / sizeof(float);
    std::vector<Buf> bufs;
    for (int t = 0; t < T; ++t) bufs.push_back(make(n));
    const int passes = int(std::max<std::size_t>(1, (std::size_t(1) << 30) / (n * sizeof(float))));
    std::vector<double> alone(1, 0), together(std::size_t(T), 0);
    for (int rep = 0; rep < 3; ++rep) {
      on_threads(T, [&](int t) {  // thread 0 alone: the others return at once
        if (t != 0) return;
        read_all(bufs[0].get(), n);
        const auto t0 = clk::now();
        for (int p = 0; p < passes; ++p) read_all(bufs[0].get(), n);
        alone[0] = std::max(alone[0], double(passes) * double(n * sizeof(float)) / seconds_since(t0) / 1e9);
      });
      on_threads(T, [&](int t) {
        read_all(bufs[std::size_t(t)].get(), n);
        const auto t0 = clk::now();
        for (int p = 0; p < passes; ++p) read_all(bufs[std::size_t(t)].get(), n);
        together[std::size_t(t)] =
            std::max(together[std::size_t(t)], double(passes) * double(n * sizeof(float)) / seconds_since(t0) / 1e9);
      });
    }
    fmt::print("{:>7} KB  {:>12.1f}  ", kib, alone[0]);
    for (double g : together) fmt::print(" {:7.1f}", g);
    fmt::print("\n");
  }

  if (T < 2) return 0;
  fmt::print("\nhand-over: thread 0 writes a buffer, then\n{:>10}  {:>16}  {:>16}  {:>22}  {:>22}\n", "buffer",
             "thread 1 reads", "thread 0 reads", "thread 1 rewrites it", "thread 1 rewrites again");
  for (std::size_t kib : {192u, 384u, 1536u, 4096u}) {
    const std::size_t n = kib * 1024 / sizeof(float);
    Buf buf = make(n);
    double other = 0, own = 0, over_other = 0, over_own = 0;
    const double bytes = double(n * sizeof(float));
    // Thread 0 writes the buffer, then thread `reader` sums it: GB/s.
    auto handed_to = [&](int reader, int rep) {
      on_threads(T, [&](int t) {
        if (t == 0) write_all(buf.get(), n, float(rep));
      });
      double gbs = 0;
      on_threads(T, [&](int t) {
        if (t != reader) return;
        const auto t0 = clk::now();
        read_all(buf.get(), n);
        gbs = bytes / seconds_since(t0) / 1e9;
      });
      return gbs;
    };
    for (int rep = 0; rep < 50; ++rep) {
      other = std::max(other, handed_to(1, rep));
      own = std::max(own, handed_to(0, rep));
      on_threads(T, [&](int t) {
        if (t != 1) return;
        auto t0 = clk::now();
        write_all(buf.get(), n, 2.f);
        over_other = std::max(over_other, bytes / seconds_since(t0) / 1e9);
        t0 = clk::now();
        write_all(buf.get(), n, 3.f);
        over_own = std::max(over_own, bytes / seconds_since(t0) / 1e9);
      });
    }
    fmt::print("{:>7} KB  {:>16.1f}  {:>16.1f}  {:>22.1f}  {:>22.1f}\n", kib, other, own, over_other, over_own);
  }
}
