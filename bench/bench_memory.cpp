// bench_memory: how fast the machine's cores read memory, alone and together, and what
// reading values another core wrote costs; run through gradgraph's own thread pool
// (ops/cpu/parallel.h), so the threads sit on the CPUs a training step's do; on Google Benchmark.
//
// Usage: bench_memory [--benchmark_...]    (threads: GG_NUM_THREADS, default all)
//   reads/<size>KB/alone: thread 0 sums its own buffer, the other threads idle;
//   reads/<size>KB/together: every thread sums its own buffer at the same time. Buffers
//     that fit a core's L2 or the L3 should read as fast together as alone; from DRAM the
//     threads share one bandwidth, so a pass over values that left the caches gets no
//     faster with a second thread. An iteration is one hand-out to the pool, in which each
//     thread reads its buffer enough times to make the hand-out's cost negligible.
//   handover/<size>KB/<case> (two threads or more): one thread writes a buffer, untimed,
//   then one access to it is timed:
//     read_other: thread 0 writes, thread 1 sums it (the values come from the other core's cache),
//     read_own: thread 0 writes, thread 0 sums it (its own cache),
//     rewrite_other: thread 0 writes, thread 1 overwrites it (over the other core's lines),
//     rewrite_own: thread 1 writes, thread 1 overwrites it (over its own).
//     The timed access runs on a pool thread and takes microseconds, about what the
//     hand-out to that thread takes, so its time is taken on that thread and handed to the
//     library as manual time; a run is kHandOverIterations (200) of them.
//   Counters: bytes_per_second (reads: every thread's bytes together; handover: the one
//   timed thread's) and, for the reads, per_thread (one thread's), in bytes/s (the
//   console's G/s is GB/s, 10^9 bytes a second). --benchmark_repetitions=N gives the mean,
//   median and spread of N runs. No timing assertion anywhere: a benchmark, not a test.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "ops/cpu/parallel.h"

namespace {

struct Free {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float, Free>;

Buf make(std::size_t floats) {
  const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  return Buf(p);
}

// Sums n floats (n a multiple of 64) in 64 independent partial sums, which the compiler
// keeps in vector registers.
void read_all(const float* a, std::size_t n) {
  float s[64] = {};
  for (std::size_t i = 0; i < n; i += 64)
    for (std::size_t j = 0; j < 64; ++j) s[j] += a[i + j];
  float t = 0;
  for (float v : s) t += v;
  benchmark::DoNotOptimize(t);
}

void write_all(float* a, std::size_t n, float v) {
  std::fill(a, a + n, v);
  benchmark::ClobberMemory();
}

// Runs body(t) on every thread t at once, through the pool (thread t takes chunk t).
template <class F>
void on_threads(int threads, F body) {
  gg::parallel_for(threads, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) body(int(t));
  });
}

// Bytes each thread reads in one hand-out (at least one pass over its buffer).
constexpr std::size_t kReadBytesPerHandOut = std::size_t(64) << 20;
constexpr benchmark::IterationCount kHandOverIterations = 200;

void bm_reads(benchmark::State& state, std::size_t kib, bool together) {
  const int T = gg::num_threads(), working = together ? T : 1;
  const std::size_t n = kib * 1024 / sizeof(float), bytes = n * sizeof(float);
  const int passes = int(std::max<std::size_t>(1, kReadBytesPerHandOut / bytes));
  std::vector<Buf> bufs(static_cast<std::size_t>(T));
  on_threads(T, [&](int t) {  // each buffer allocated and first written by the thread that reads it
    bufs[std::size_t(t)] = make(n);
    write_all(bufs[std::size_t(t)].get(), n, 1.f);
  });
  for (auto _ : state)
    on_threads(T, [&](int t) {
      if (t >= working) return;
      for (int p = 0; p < passes; ++p) read_all(bufs[std::size_t(t)].get(), n);
    });
  const double per_thread = double(passes) * double(bytes);
  state.counters["bytes_per_second"] = benchmark::Counter(per_thread * working, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["per_thread"] = benchmark::Counter(per_thread, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(together ? fmt::format("{} threads at once", T) : "thread 0 alone");
}

enum class HandOver { read_other, read_own, rewrite_other, rewrite_own };

void bm_handover(benchmark::State& state, std::size_t kib, HandOver what) {
  const int T = gg::num_threads();
  const std::size_t n = kib * 1024 / sizeof(float), bytes = n * sizeof(float);
  Buf buf = make(n);
  const int actor = what == HandOver::read_own ? 0 : 1;  // the thread whose access is timed
  float value = 0;
  for (auto _ : state) {
    value += 1.f;
    on_threads(T, [&](int t) {  // the write before, untimed
      if (t == (what == HandOver::rewrite_own ? 1 : 0)) write_all(buf.get(), n, value);
    });
    double seconds = 0;
    on_threads(T, [&](int t) {
      if (t != actor) return;
      const auto t0 = std::chrono::steady_clock::now();
      if (what == HandOver::read_other || what == HandOver::read_own)
        read_all(buf.get(), n);
      else
        write_all(buf.get(), n, value + 0.5f);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    state.SetIterationTime(seconds);
  }
  state.counters["bytes_per_second"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  const int T = std::max(1, gg::num_threads());
  gg::set_thread_shares(std::vector<double>(std::size_t(T), 1.0));  // chunk t on thread t, always
  benchmark::AddCustomContext("gg_threads", fmt::format("{} (GG_NUM_THREADS)", T));

  for (std::size_t kib : {256u, 768u, 3072u, 12288u, 65536u})
    for (bool together : {false, true})
      benchmark::RegisterBenchmark(fmt::format("reads/{}KB/{}", kib, together ? "together" : "alone").c_str(),
                                   [kib, together](benchmark::State& st) { bm_reads(st, kib, together); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();  // wall time: the pool's threads do the reading
  if (T >= 2) {
    const std::pair<HandOver, const char*> cases[] = {{HandOver::read_other, "read_other"},
                                                      {HandOver::read_own, "read_own"},
                                                      {HandOver::rewrite_other, "rewrite_other"},
                                                      {HandOver::rewrite_own, "rewrite_own"}};
    for (std::size_t kib : {192u, 384u, 1536u, 4096u})
      for (const auto& [what, name] : cases)
        benchmark::RegisterBenchmark(fmt::format("handover/{}KB/{}", kib, name).c_str(),
                                     [kib, what = what](benchmark::State& st) { bm_handover(st, kib, what); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime()
            ->Iterations(kHandOverIterations);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
