// bench_gemm: gg::gemm against OpenBLAS cblas_sgemm on the project's shapes and on squares,
// on Google Benchmark: GFLOPS and the fraction of the machine's FMA peak (measured first,
// ops/cpu/peak.h) as counters, both libraries on the same thread count. Not a test: it checks
// only that the two results agree (a mismatch is reported as the benchmark's error).
//
// Usage: [OPENBLAS_CORETYPE=SkylakeX|Haswell] bench_gemm [threads] [cold] [--benchmark_...]
//   threads: default gg::num_threads() (GG_NUM_THREADS).
//   cold: every timed call comes after a 128 MB sweep, as a product in a training step
//     comes after other work (what the sweep leaves cold is mostly the packing buffers, the
//     code and the worker's hand-off, not the operands); a run is then 25 calls
//     (kColdCalls), each timed alone without its sweep, whatever --benchmark_min_time says.
//   Benchmarks are named <op(A)op(B)>/<M>x<N>x<K>/<gg|openblas>, e.g. NT/768x512x128/gg
//   (the library appends /real_time, or /iterations:25/manual_time when cold); the label is
//   the shape as the model has it. The library's flags do the rest, e.g.
//     bench_gemm 2 --benchmark_filter=/gg/                  gg::gemm only
//     bench_gemm 2 --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
//         --benchmark_report_aggregates_only=true   mean, median, stddev and cv of 9 runs,
//                                                   gg's and OpenBLAS's interleaved, so that
//                                                   background load hits both alike
//     bench_gemm 2 --benchmark_format=json --benchmark_out=gemm.json
//   Counters: GFLOPS, and peak_fraction of the FMA peak on `threads` threads (the console
//   marks both "/s": they are rates of the measured time). The peak is in the context.
#include <benchmark/benchmark.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ops/cpu/bf16.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/peak.h"

#ifdef GG_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);
#endif

namespace {

using i64 = std::int64_t;

struct Shape {
  const char* what;
  bool ta, tb;
  i64 M, N, K;
};

const Shape kShapes[] = {
    {"square 256", false, false, 256, 256, 256},
    {"square 512", false, false, 512, 512, 512},
    {"square 1024", false, false, 1024, 1024, 1024},
    {"x(768,128) @ w(128,512)", false, false, 768, 512, 128},
    {"x(768,512) @ w(512,128)", false, false, 768, 128, 512},
    {"dy(768,512) @ w(128,512)^T", false, true, 768, 128, 512},
    {"dy(768,128) @ w(512,128)^T", false, true, 768, 512, 128},
    {"x(768,128)^T @ dy(768,512)", true, false, 128, 512, 768},
    {"x(768,512)^T @ dy(768,128)", true, false, 512, 128, 768},
    {"x(768,128)^T @ dq(768,128)", true, false, 128, 128, 768},
    {"x(768,128) @ wq(128,128)^T", false, true, 768, 128, 128},
    {"dq(768,128) @ wq(128,128)", false, false, 768, 128, 128},
    {"x(768,128) @ emb(65,128)^T", false, true, 768, 65, 128},
    {"dlogits(768,65) @ emb(65,128)", false, false, 768, 128, 65},
    {"dlogits(768,65)^T @ x(768,128)", true, false, 65, 128, 768},
    {"medium x @ fc1^T", false, true, 2048, 1536, 384},
    {"medium h @ fc2^T", false, true, 2048, 384, 1536},
    {"medium dy @ fc2", false, false, 2048, 1536, 384},
    {"medium dh @ fc1", false, false, 2048, 384, 1536},
    {"medium h^T @ dy", true, false, 1536, 384, 2048},
    {"medium x^T @ dh", true, false, 384, 1536, 2048},
    {"medium x @ qkv^T", false, true, 2048, 384, 384},
    {"medium x^T @ dq", true, false, 384, 384, 2048},
    {"q(64,32) @ k(64,32)^T", false, true, 64, 64, 32},
    {"att(64,64) @ v(64,32)", false, false, 64, 32, 64},
    {"att(64,64)^T @ dy(64,32)", true, false, 64, 32, 64},
};

// Calls a cold run times (each after the sweep): a fixed count, because the sweep takes
// milliseconds and the library would otherwise run calls until they add up to its
// minimum time.
constexpr i64 kColdCalls = 25;

enum class Lib { gg, bf16, openblas };

// A shape's operands, packed row-major: A (M, K) or (K, M), B (K, N) or (N, K), C (M, N).
struct Operands {
  i64 lda, ldb, ldc;
  std::vector<float> A, B, C;
  explicit Operands(const Shape& s) : lda(s.ta ? s.M : s.K), ldb(s.tb ? s.K : s.N), ldc(s.N) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    A.resize(std::size_t(s.M * s.K));
    B.resize(std::size_t(s.K * s.N));
    C.resize(std::size_t(s.M * s.N));
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
  }
  void run(const Shape& s, Lib lib, float* out) {
    if (lib == Lib::gg) {
      gg::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, out, ldc);
      return;
    }
    if (lib == Lib::bf16) {
      gg::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, out, ldc);
      return;
    }
#ifdef GG_HAVE_OPENBLAS
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, int(s.M), int(s.N),
                int(s.K), 1.f, A.data(), int(lda), B.data(), int(ldb), 0.f, out, int(ldc));
#endif
  }
};

std::vector<float>& sweep_buffer() {
  static std::vector<float> sweep(std::size_t(32) << 20);  // 128 MB, more than any L3 here
  return sweep;
}

void evict() {
  auto& sweep = sweep_buffer();
  for (std::size_t i = 0; i < sweep.size(); i += 16) sweep[i] += 1.f;
  benchmark::DoNotOptimize(sweep.data());
}

void bm_gemm(benchmark::State& state, const Shape& s, Lib lib, bool cold, double peak_gflops, double bf16_peak_gflops) {
  if (lib == Lib::bf16) peak_gflops = bf16_peak_gflops;
  Operands op(s);  // untimed: before the loop
  const double gflop = 2e-9 * double(s.M) * double(s.N) * double(s.K);
  state.SetLabel(s.what);
  if (!cold) {
    for (auto _ : state) {
      op.run(s, lib, op.C.data());
      benchmark::DoNotOptimize(op.C.data());
      benchmark::ClobberMemory();
    }
  } else {
    // Manual time: the sweep before each call is not part of the figure, and the library's
    // PauseTiming/ResumeTiming would put a microsecond of its own clock reads into each
    // call of a few microseconds (the attention shapes).
    for (auto _ : state) {
      evict();
      const auto t0 = std::chrono::steady_clock::now();
      op.run(s, lib, op.C.data());
      benchmark::ClobberMemory();
      state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  state.counters["GFLOPS"] = benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_fraction"] =
      benchmark::Counter(gflop / peak_gflops, benchmark::Counter::kIsIterationInvariantRate);
#ifdef GG_HAVE_OPENBLAS
  if (lib != Lib::openblas) {  // the two libraries must agree (after the loop: untimed)
    std::vector<float> ref(op.C.size());
    op.run(s, Lib::openblas, ref.data());
    float worst = 0.f;
    for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(op.C[i] - ref[i]));
    // bf16 operands: each product off by at most about 2^-8 of |a b| <= 1.
    const float bound = (lib == Lib::bf16 ? 0.008f : 1e-4f) * float(s.K);
    if (!(worst <= bound))
      state.SkipWithError(fmt::format("MISMATCH against OpenBLAS: max |difference| {}", worst).c_str());
  }
#endif
}

bool is_count(std::string_view a) {
  return !a.empty() && std::all_of(a.begin(), a.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* flags out of argv
  int threads = gg::num_threads();
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "cold") {
      cold = true;
    } else if (is_count(a)) {
      threads = std::max(1, std::atoi(argv[i]));
    } else {
      fmt::print(stderr, "bench_gemm: unknown argument '{}'; usage: bench_gemm [threads] [cold] [--benchmark_...]\n", a);
      return 2;
    }
  }
  gg::set_num_threads(threads);
  const gg::FmaPeak peak = gg::measure_fma_peak();
  const double peak_gflops = threads == 1 ? peak.per_core_gflops : peak.reference_gflops();
  benchmark::AddCustomContext("gg_threads", std::to_string(threads));
  benchmark::AddCustomContext("vector_isa", gg::cpu_vector_isa());
  benchmark::AddCustomContext("fma_peak_gflops", fmt::format("{:.1f} on {} thread{} (ops/cpu/peak.h; peak_fraction's base)",
                                                             peak_gflops, threads, threads == 1 ? "" : "s"));
  benchmark::AddCustomContext("fma_peak_gflops_per_core", fmt::format("{:.1f}", peak.per_core_gflops));
  benchmark::AddCustomContext(
      "caches", cold ? fmt::format("cold: a 128 MB sweep before every timed call, {} calls a run", kColdCalls) : "hot");
  std::vector<Lib> libs{Lib::gg};
  // gemm_bf16 (mixed precision's product), where the CPU has AVX512_BF16; its
  // peak_fraction is of the bf16 dot-product peak.
  double bf16_peak_gflops = 0;
  if (gg::cpu_has_avx512_bf16()) {
    const gg::Bf16Peak bp = gg::measure_bf16_peak();
    bf16_peak_gflops = threads == 1 ? bp.per_core_gflops : bp.total_gflops;
    benchmark::AddCustomContext("bf16_peak_gflops", fmt::format("{:.1f} (the bf16 rows' peak_fraction base)", bf16_peak_gflops));
    libs.push_back(Lib::bf16);
  }
#ifdef GG_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
  libs.push_back(Lib::openblas);
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  // OpenBLAS may pick a weak kernel for a CPU it does not know: compare with its own
  // detection and with the best kernel set this CPU runs (SkylakeX's needs AVX-512).
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", fmt::format("{} (compare unset and ={})", core ? core : "unset",
                                                               gg::cpu_has_avx512() ? "SkylakeX" : "Haswell"));
#else
  benchmark::AddCustomContext("openblas", "not found at configure time: gg::gemm only");
#endif
  if (cold) sweep_buffer();  // allocated and touched before any timing

  for (const Shape& s : kShapes)
    for (Lib lib : libs) {  // a shape's two rows next to each other
      const std::string name = fmt::format("{}{}/{}x{}x{}/{}", s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K,
                                           lib == Lib::gg ? "gg" : lib == Lib::bf16 ? "bf16" : "openblas");
      auto* b = benchmark::RegisterBenchmark(name.c_str(), [&s, lib, cold, peak_gflops, bf16_peak_gflops](benchmark::State& st) {
        bm_gemm(st, s, lib, cold, peak_gflops, bf16_peak_gflops);
      });
      b->Unit(benchmark::kMicrosecond);
      if (cold)
        b->UseManualTime()->Iterations(kColdCalls);
      else
        b->UseRealTime();  // wall time: the pool's other threads work too
    }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
