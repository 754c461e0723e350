// bench_attention: causal attention's six matrix products on one (batch, head) slice at a
// time, as the executor's batch-slice chains run them (ops/passes/masked.h's slice_matmul): the
// masked row blocks against the full products, on one thread, on Google Benchmark, with
// GFLOPS done and the fraction of the one-core FMA peak (ops/cpu/peak.h) as counters.
//
// Usage: bench_attention [cold] [T hd H B] [--benchmark_...]
//   Default: the small GPT's shapes (bench/gpt_small.json, batch 12: T 64 hd 32 H 4 B 12)
//   and the medium's (bench/gpt_medium.json, batch 8: T 256 hd 64 H 6 B 8).
//   Benchmarks are named <shapes>/<product>/<masked|full>, <shapes> small, medium or
//   T<T>_hd<hd>_H<H>_B<B> (the library appends /real_time); an iteration is the product over
//   all B * H slices. all_six runs the six products slice by slice, as a chain does: their
//   total. 28 benchmarks, each at least the library's --benchmark_min_time (0.5 s by default).
//     bench_attention --benchmark_filter='^small/'
//     bench_attention --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//         --benchmark_report_aggregates_only=true   mean, median, stddev and cv of 5 runs,
//                                                   masked and full interleaved
//     bench_attention --benchmark_format=json --benchmark_out=attention.json
//   Counters: GFLOPS done (the masked blocks' share of the terms only), peak_fraction of
//   the one-core peak (the console marks both "/s": rates of the measured time), and
//   terms, the share of the full product's multiply-adds done. full time / masked time is
//   what the blocks buy.
//
// The operands are laid out as in a training step: q, k, v and dO as (B, T, H, hd), so a
// head's rows are H * hd apart; the weights P and their gradient dS as (B, H, T, T), zero
// above the diagonal. In a chain, softmax (forward) and its gradient (backward) have just
// written a slice's P and dS when its products read them, and the (T, T) results (S and dP)
// go to a per-thread scratch block reused slice after slice: here every slice reads the
// same slice-sized P and dS and writes its (T, T) results to one slice-sized buffer, all
// of which stay in L2. `cold` gives each slice its own P, dS and (T, T) results, so that at
// the medium shapes (24 MB of weights, 12 MB of each result) they come from and go to
// memory. One thread, so the host's other work disturbs the figures less than a
// two-thread step's. No timing assertion anywhere: a benchmark, not a test.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ops/ir/build.h"
#include "ops/passes/masked.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/peak.h"

namespace {

using i64 = std::int64_t;

enum Operand { Q, K, V, DO, P, DS };

struct Product {
  const char* slug;  // in the benchmark's name
  const char* name;  // its label
  bool ta, tb;
  gg::MaskedProduct::Kind kind;
  Operand a, b;
  bool out_tt;  // the result is (T, T) (else (T, hd), written into a (B, T, H, hd) tensor)
};

// forward: S = q k^T, O = P v; backward: dP = dO v^T, dV = P^T dO, dQ = dS k, dK = dS^T q.
const Product kProducts[] = {
    {"q_kT", "q k^T   (skip_out)", false, true, gg::MaskedProduct::skip_out, Q, K, true},
    {"P_v", "P v     (skip_k)", false, false, gg::MaskedProduct::skip_k, P, V, false},
    {"dO_vT", "dO v^T  (skip_out)", false, true, gg::MaskedProduct::skip_out, DO, V, true},
    {"PT_dO", "P^T dO  (skip_k, A^T)", true, false, gg::MaskedProduct::skip_k, P, DO, false},
    {"dS_k", "dS k    (skip_k)", false, false, gg::MaskedProduct::skip_k, DS, K, false},
    {"dST_q", "dS^T q  (skip_k, A^T)", true, false, gg::MaskedProduct::skip_k, DS, Q, false},
};
constexpr int kCount = int(std::size(kProducts));

struct Dims {
  std::string name;
  i64 T, hd, H, B;
};

// One set of shapes' operands and row blocks, made on its first benchmark (untimed) and
// shared by all of them.
class Slices {
 public:
  Slices(const Dims& d, bool cold) : d_(d), cold_(cold) {}

  // Runs product i (masked or full) on slice (b, h).
  void run(int i, bool masked, i64 b, i64 h) {
    init();
    const Product& p = kProducts[std::size_t(i)];
    const bool a_tt = p.a == P || p.a == DS, b_tt = p.b == P || p.b == DS;
    const gg::View in[2] = {{data(p.a, b, h), a_tt ? &s_tt_ : &s_th_}, {data(p.b, b, h), b_tt ? &s_tt_ : &s_th_}};
    float* const result_tt = out_tt_.data() + (cold_ ? (b * d_.H + h) * d_.T * d_.T : 0);
    const gg::View out{p.out_tt ? result_tt : out_th_.data() + b * d_.T * D_ + h * d_.hd, p.out_tt ? &s_tt_ : &s_th_};
    const gg::SliceStrides ld{a_tt ? 0 : D_, b_tt ? 0 : D_, p.out_tt ? 0 : D_};
    gg::slice_matmul(nodes_[std::size_t(i)], masked ? &blocks_[std::size_t(i)] : nullptr, in, out, ld);
  }
  // The multiply-adds x 2 of product i over all slices, and the share the masked blocks do.
  double full_flops() const { return 2.0 * double(d_.B * d_.H) * double(d_.T) * double(d_.T) * double(d_.hd); }
  double fraction(int i) {
    init();
    return blocks_[std::size_t(i)].fraction;
  }
  const Dims& dims() const { return d_; }

 private:
  void init() {
    if (ready_) return;
    ready_ = true;
    const i64 T = d_.T, S = d_.B * d_.H, slices_tt = cold_ ? S : 1;
    D_ = d_.H * d_.hd;
    s_th_ = gg::Shape{T, d_.hd}, s_tt_ = gg::Shape{T, T};
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    auto randn = [&](i64 n) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (float& x : v) x = nd(rng);
      return v;
    };
    for (auto& x : heads_) x = randn(d_.B * T * D_);
    for (auto& w : weights_) {
      w = randn(slices_tt * T * T);
      for (i64 s = 0; s < slices_tt; ++s)  // causal: 0 above the diagonal, as softmax leaves them
        for (i64 r = 0; r < T; ++r) std::fill_n(w.data() + (s * T + r) * T + r + 1, T - r - 1, 0.f);
    }
    out_th_.resize(std::size_t(d_.B * T * D_));
    out_tt_.resize(std::size_t(slices_tt * T * T));

    // The row blocks the executor would use, from the real analysis of a causal mask.
    gg::Graph g;
    std::vector<float> mask(std::size_t(T * T));
    for (i64 r = 0; r < T; ++r)
      for (i64 c = 0; c <= r; ++c) mask[std::size_t(r * T + c)] = 1.f;
    const gg::NodeId m = gg::op::constant(g, std::move(mask), {T, T});
    for (const Product& p : kProducts) {
      gg::Node n{gg::OpKind::matmul, {}, {}, {}, gg::DType::f32, "", {}, {}};
      n.attrs.trans_a = p.ta, n.attrs.trans_b = p.tb;
      blocks_.push_back(gg::masked_blocks(g, n, {p.kind, m}));
      nodes_.push_back(std::move(n));
    }
  }
  float* data(Operand o, i64 b, i64 h) {
    if (o == P || o == DS) return weights_[o == DS].data() + (cold_ ? (b * d_.H + h) * d_.T * d_.T : 0);
    return heads_[o].data() + b * d_.T * D_ + h * d_.hd;
  }

  Dims d_;
  bool cold_;
  bool ready_ = false;
  i64 D_ = 0;
  gg::Shape s_th_, s_tt_;
  std::vector<float> heads_[4], weights_[2], out_th_, out_tt_;
  std::vector<gg::Node> nodes_;
  std::vector<gg::MaskedBlocks> blocks_;
};

// product: an index into kProducts, or kCount for all six one slice after the other.
void bm_product(benchmark::State& state, Slices& sl, int product, bool masked, double peak_gflops) {
  const i64 B = sl.dims().B, H = sl.dims().H;
  double done = 0, full = 0;
  for (int i = 0; i < kCount; ++i)
    if (product == kCount || i == product) {
      full += sl.full_flops();
      done += sl.full_flops() * (masked ? sl.fraction(i) : 1.0);
    }
  for (auto _ : state) {
    for (i64 b = 0; b < B; ++b)
      for (i64 h = 0; h < H; ++h) {
        if (product < kCount) {
          sl.run(product, masked, b, h);
        } else {
          for (int i = 0; i < kCount; ++i) sl.run(i, masked, b, h);
        }
      }
    benchmark::ClobberMemory();
  }
  state.SetLabel(product < kCount ? kProducts[std::size_t(product)].name : "all six, slice by slice");
  state.counters["GFLOPS"] = benchmark::Counter(done * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_fraction"] =
      benchmark::Counter(done * 1e-9 / peak_gflops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["terms"] = done / full;
}

void register_shapes(const Dims& d, bool cold, double peak_gflops, std::vector<std::unique_ptr<Slices>>& keep) {
  keep.push_back(std::make_unique<Slices>(d, cold));
  Slices* sl = keep.back().get();
  for (int i = 0; i <= kCount; ++i)
    for (bool masked : {true, false}) {
      const std::string name =
          fmt::format("{}/{}/{}", d.name, i < kCount ? kProducts[std::size_t(i)].slug : "all_six", masked ? "masked" : "full");
      benchmark::RegisterBenchmark(name.c_str(), [sl, i, masked, peak_gflops](benchmark::State& st) {
        bm_product(st, *sl, i, masked, peak_gflops);
      })->Unit(benchmark::kMillisecond)->UseRealTime();
    }
}

bool is_count(std::string_view a) {
  return !a.empty() && std::all_of(a.begin(), a.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* flags out of argv
  constexpr const char* usage = "usage: bench_attention [cold] [T hd H B] [--benchmark_...]";
  bool cold = false;
  std::vector<i64> dims;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "cold" && dims.empty()) {
      cold = true;
    } else if (is_count(a) && std::atoll(argv[i]) > 0) {
      dims.push_back(std::atoll(argv[i]));
    } else {
      fmt::print(stderr, "bench_attention: unknown argument '{}'; {}\n", a, usage);
      return 2;
    }
  }
  if (!dims.empty() && dims.size() != 4) {
    fmt::print(stderr, "bench_attention: give all four of T hd H B, or none{}; {}\n",
               dims.size() == 5 ? " (runs and repetitions: --benchmark_min_time, --benchmark_repetitions)" : "", usage);
    return 2;
  }
  gg::set_num_threads(1);  // slice_matmul runs on the calling thread inside a chain
  const gg::FmaPeak peak = gg::measure_fma_peak();
  benchmark::AddCustomContext("vector_isa", gg::cpu_vector_isa());
  benchmark::AddCustomContext("fma_peak_gflops",
                              fmt::format("{:.1f} on 1 thread (ops/cpu/peak.h; peak_fraction's base)", peak.per_core_gflops));
  benchmark::AddCustomContext("weights_and_results",
                              cold ? "cold: P, dS and the (T, T) results a slice each"
                                   : "as in a chain: one slice-sized P, dS and (T, T) result buffer for all slices");

  std::vector<std::unique_ptr<Slices>> keep;
  if (dims.empty()) {
    register_shapes({"small", 64, 32, 4, 12}, cold, peak.per_core_gflops, keep);
    register_shapes({"medium", 256, 64, 6, 8}, cold, peak.per_core_gflops, keep);
  } else {
    register_shapes({fmt::format("T{}_hd{}_H{}_B{}", dims[0], dims[1], dims[2], dims[3]), dims[0], dims[1], dims[2], dims[3]},
                    cold, peak.per_core_gflops, keep);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
