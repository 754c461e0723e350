// bench_gemm: GFLOP/s of gg::gemm against OpenBLAS cblas_sgemm on the project's shapes and
// on squares, median of several timed repetitions, both libraries on the same thread count,
// each also as a fraction of the machine's FMA peak measured first (ops/peak.h).
// Usage: [OPENBLAS_CORETYPE=SkylakeX|Haswell] bench_gemm [threads] [cold]
//   threads: default gg::num_threads(); cold: every timed call comes after a 128 MB sweep,
//   as a product in a training step comes after other work (what the sweep leaves cold is
//   mostly the packing buffers, the code and the worker's hand-off, not the operands).
// Not a test: it checks only that the two results agree, and asserts nothing about speed.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ops/gemm.h"
#include "ops/peak.h"
#include "ops/parallel.h"

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

using clock_type = std::chrono::steady_clock;

// How many calls of f take about 20 ms (after one warm-up call: pool, buffers, caches).
template <class F>
i64 calls_per_sample(F& f) {
  f();
  for (i64 iters = 1;; iters *= 2) {
    auto t0 = clock_type::now();
    for (i64 i = 0; i < iters; ++i) f();
    if (std::chrono::duration<double>(clock_type::now() - t0).count() >= 0.02) return iters;
  }
}

// Seconds per call for one sample of `iters` calls.
template <class F>
double sample(F& f, i64 iters) {
  auto t0 = clock_type::now();
  for (i64 i = 0; i < iters; ++i) f();
  return std::chrono::duration<double>(clock_type::now() - t0).count() / double(iters);
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

constexpr int kSamples = 9;  // per library and shape; samples of gg and OpenBLAS alternate

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : gg::num_threads();
  const bool cold = argc > 2 && std::string(argv[2]) == "cold";
  gg::set_num_threads(threads);
  const gg::FmaPeak peak = gg::measure_fma_peak();
  const double peak_gf = threads == 1 ? peak.per_core_gflops : peak.reference_gflops();
  const int samples = (cold ? 3 : 1) * kSamples;  // cold samples are single calls: more of them
  fmt::print("FMA peak {:.1f} GFLOPS on {} thread{} ({}, ops/peak.h), {} caches\n", peak_gf, threads,
             threads == 1 ? "" : "s", gg::cpu_vector_isa(), cold ? "cold (a 128 MB sweep before every timed call)" : "hot");
#ifdef GG_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  const bool avx512 = gg::cpu_has_avx512();
  // OpenBLAS may pick a weak kernel for a CPU it does not know: compare with its own
  // detection and with the best kernel set this CPU runs (SkylakeX's needs AVX-512).
  fmt::print("note: compare with OPENBLAS_CORETYPE unset and ={} (now: {})\n", avx512 ? "SkylakeX" : "Haswell",
             core ? core : "unset");
  fmt::print("OpenBLAS core: {}, threads: {}\n", openblas_get_corename(), threads);
#else
  fmt::print("OpenBLAS not found at configure time: gg::gemm only. threads: {}\n", threads);
#endif

  const Shape shapes[] = {
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

  fmt::print("{:<30} {:>5} {:>5} {:>5} {:>10} {:>10} {:>9} {:>8} {:>8}\n", "shape (op(A) @ op(B))", "M",
             "N", "K", "gg GF/s", "oblas GF/s", "gg/oblas", "gg %pk", "oblas %pk");
  std::vector<float> sweep(cold ? std::size_t(32) << 20 : 0);  // 128 MB, more than any L3 here
  auto evict = [&] {
    for (std::size_t i = 0; i < sweep.size(); i += 16) sweep[i] += 1.f;
  };
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Shape& s : shapes) {
    // A: (M, K) or (K, M); B: (K, N) or (N, K); C: (M, N); all packed row-major.
    const i64 lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N, ldc = s.N;
    std::vector<float> A(std::size_t(s.M * s.K)), B(std::size_t(s.K * s.N));
    std::vector<float> C(std::size_t(s.M * s.N)), R(std::size_t(s.M * s.N));
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
    const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);

    auto run_gg = [&] {
      gg::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), ldc);
    };
    std::vector<double> t_gg;
#ifdef GG_HAVE_OPENBLAS
    auto run_ob = [&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                  s.tb ? CblasTrans : CblasNoTrans, int(s.M), int(s.N), int(s.K), 1.f, A.data(),
                  int(lda), B.data(), int(ldb), 0.f, R.data(), int(ldc));
    };
    std::vector<double> t_ob;
    const i64 n_gg = cold ? 1 : calls_per_sample(run_gg), n_ob = cold ? 1 : calls_per_sample(run_ob);
    for (int r = 0; r < samples; ++r) {  // alternate, so background load hits both alike
      evict();
      t_gg.push_back(sample(run_gg, n_gg));
      evict();
      t_ob.push_back(sample(run_ob, n_ob));
    }
    const double gf_gg = flops / median(t_gg) * 1e-9, gf_ob = flops / median(t_ob) * 1e-9;
    float worst = 0.f;
    for (std::size_t i = 0; i < C.size(); ++i) worst = std::max(worst, std::abs(C[i] - R[i]));
    fmt::print("{:<30} {:>5} {:>5} {:>5} {:>10.1f} {:>10.1f} {:>9.2f} {:>7.1f}% {:>7.1f}%{}\n", s.what, s.M, s.N,
               s.K, gf_gg, gf_ob, gf_gg / gf_ob, 100 * gf_gg / peak_gf, 100 * gf_ob / peak_gf,
               worst > 1e-4f * float(s.K) ? fmt::format("  MISMATCH {}", worst) : "");
#else
    const i64 n_gg = cold ? 1 : calls_per_sample(run_gg);
    for (int r = 0; r < samples; ++r) {
      evict();
      t_gg.push_back(sample(run_gg, n_gg));
    }
    const double gf_gg = flops / median(t_gg) * 1e-9;
    fmt::print("{:<30} {:>5} {:>5} {:>5} {:>10.1f} {:>10} {:>9} {:>7.1f}% {:>8}\n", s.what, s.M, s.N, s.K, gf_gg,
               "-", "-", 100 * gf_gg / peak_gf, "-");
#endif
  }
  fmt::print("gg/oblas > 1 means gg::gemm is faster.\n");
  return 0;
}
