// bench_attention: causal attention's six matrix products on one (batch, head) slice at a
// time, as the executor's batch-slice chains run them (ops/masked.h's slice_matmul): the
// masked row blocks against the full products, on one thread, in GFLOPS done and as a
// fraction of the one-core FMA peak (ops/peak.h).
//
// Usage: bench_attention [cold] [T hd H B [sweeps]]   (default: the small and the medium GPT's shapes)
//
// The operands are laid out as in a training step: q, k, v and dO as (B, T, H, hd), so a
// head's rows are H * hd apart; the weights P and their gradient dS as (B, H, T, T), zero
// above the diagonal. Each sweep runs the six products slice after slice (the data of one
// slice stays in cache between them, as in a chain); a product's time is its best sweep's
// sum over the slices. Before a slice's products its P and dS are rewritten, untimed, as
// softmax and its gradient write them just before inside a chain, and the (T, T) results
// (S and dP) go to one slice-sized buffer, as to a chain's per-thread scratch; `cold`
// leaves P and dS as they are and gives each slice its own results, so that at the medium
// shapes (24 MB of weights, 12 MB of each result) they come from and go to memory. One
// thread, so the host's other work disturbs the figures less than a two-thread step's. No
// timing assertion anywhere: a benchmark, not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "ops/build.h"
#include "ops/masked.h"
#include "ops/parallel.h"
#include "ops/peak.h"

namespace {

using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;

enum Operand { Q, K, V, DO, P, DS };

struct Product {
  const char* name;
  bool ta, tb;
  gg::MaskedProduct::Kind kind;
  Operand a, b;
  bool out_tt;  // the result is (T, T) (else (T, hd), written into a (B, T, H, hd) tensor)
};

// forward: S = q k^T, O = P v; backward: dP = dO v^T, dV = P^T dO, dQ = dS k, dK = dS^T q.
const Product kProducts[] = {
    {"q k^T   (skip_out)", false, true, gg::MaskedProduct::skip_out, Q, K, true},
    {"P v     (skip_k)", false, false, gg::MaskedProduct::skip_k, P, V, false},
    {"dO v^T  (skip_out)", false, true, gg::MaskedProduct::skip_out, DO, V, true},
    {"P^T dO  (skip_k, A^T)", true, false, gg::MaskedProduct::skip_k, P, DO, false},
    {"dS k    (skip_k)", false, false, gg::MaskedProduct::skip_k, DS, K, false},
    {"dS^T q  (skip_k, A^T)", true, false, gg::MaskedProduct::skip_k, DS, Q, false},
};
constexpr int kCount = int(std::size(kProducts));

void run(i64 T, i64 hd, i64 H, i64 B, int sweeps, double peak, bool as_in_chain) {
  const i64 D = H * hd, S = B * H;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  auto randn = [&](i64 n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = nd(rng);
    return v;
  };
  std::vector<float> heads[4] = {randn(B * T * D), randn(B * T * D), randn(B * T * D), randn(B * T * D)};
  std::vector<float> weights[2] = {randn(S * T * T), randn(S * T * T)};
  for (auto& w : weights)  // causal: 0 above the diagonal, as softmax leaves them
    for (i64 s = 0; s < S; ++s)
      for (i64 r = 0; r < T; ++r) std::fill_n(w.data() + (s * T + r) * T + r + 1, T - r - 1, 0.f);
  // A (T, T) result (S = q k^T, dP = dO v^T) goes to one slice-sized buffer, as in a chain,
  // where those values live in a per-thread scratch block reused slice after slice; `cold`
  // keeps one per slice, as the full (B, H, T, T) tensor they would be without the chains.
  std::vector<float> out_th(std::size_t(B * T * D)), out_tt(std::size_t((as_in_chain ? 1 : S) * T * T));
  const std::vector<float> slice_weights[2] = {{weights[0].begin(), weights[0].begin() + T * T},
                                               {weights[1].begin(), weights[1].begin() + T * T}};

  // The row blocks the executor would use, from the real analysis of a causal mask.
  gg::Graph g;
  std::vector<float> mask(std::size_t(T * T));
  for (i64 r = 0; r < T; ++r)
    for (i64 c = 0; c <= r; ++c) mask[std::size_t(r * T + c)] = 1.f;
  const gg::NodeId m = gg::op::constant(g, std::move(mask), {T, T});
  std::vector<gg::Node> nodes;
  std::vector<gg::MaskedBlocks> blocks;
  for (const Product& p : kProducts) {
    gg::Node n{gg::OpKind::matmul, {}, {}, {}, gg::DType::f32, "", {}, {}};
    n.attrs.trans_a = p.ta, n.attrs.trans_b = p.tb;
    blocks.push_back(gg::masked_blocks(g, n, {p.kind, m}));
    nodes.push_back(std::move(n));
  }

  const gg::Shape s_th{T, hd}, s_tt{T, T};
  auto data = [&](Operand o, i64 b, i64 h) -> float* {
    if (o == P || o == DS) return weights[o == DS].data() + (b * H + h) * T * T;
    return heads[o].data() + b * T * D + h * hd;
  };
  // Each mode's best sweep, product by product: masked (0) and full (1).
  std::vector<double> best[2] = {std::vector<double>(kCount, 1e30), std::vector<double>(kCount, 1e30)};
  for (int sweep = 0; sweep < 2 * sweeps; ++sweep) {
    const int mode = sweep % 2;  // the two modes alternate
    std::vector<double> t(kCount, 0.0);
    for (i64 b = 0; b < B; ++b)
      for (i64 h = 0; h < H; ++h) {
        // As in a chain, where softmax (forward) and its gradient (backward) have just
        // written them: the slice's P and dS rewritten, untimed, so that they come from L2
        // (B * H slices of both are tens of MB: read cold, they came from DRAM, and the
        // products that read them ran at half the speed they do inside a step).
        if (as_in_chain)
          for (int w = 0; w < 2; ++w)
            std::copy(slice_weights[w].begin(), slice_weights[w].end(), weights[w].data() + (b * H + h) * T * T);
        for (int i = 0; i < kCount; ++i) {
          const Product& p = kProducts[std::size_t(i)];
          const bool a_tt = p.a == P || p.a == DS, b_tt = p.b == P || p.b == DS;
          const gg::View in[2] = {{data(p.a, b, h), a_tt ? &s_tt : &s_th}, {data(p.b, b, h), b_tt ? &s_tt : &s_th}};
          float* const result_tt = out_tt.data() + (as_in_chain ? 0 : (b * H + h) * T * T);
          const gg::View out{p.out_tt ? result_tt : out_th.data() + b * T * D + h * hd, p.out_tt ? &s_tt : &s_th};
          const gg::SliceStrides ld{a_tt ? 0 : D, b_tt ? 0 : D, p.out_tt ? 0 : D};
          const auto t0 = Clock::now();
          gg::slice_matmul(nodes[std::size_t(i)], mode == 0 ? &blocks[std::size_t(i)] : nullptr, in, out, ld);
          t[std::size_t(i)] += std::chrono::duration<double>(Clock::now() - t0).count();
        }
      }
    for (int i = 0; i < kCount; ++i) best[mode][std::size_t(i)] = std::min(best[mode][std::size_t(i)], t[std::size_t(i)]);
  }

  fmt::print("\nT {} hd {} H {} B {}: {} slices, best of {} sweeps each way, one thread\n", T, hd, H, B, S, sweeps);
  fmt::print("{:<22} {:>9} {:>10} {:>7} {:>9} {:>10} {:>7} {:>11}\n", "product", "masked ms", "GFLOPS", "% peak",
             "full ms", "GFLOPS", "% peak", "full/masked");
  double total[2] = {0, 0};
  for (int i = 0; i < kCount; ++i) {
    const double full_flops = 2.0 * double(S) * double(T) * double(T) * double(hd);
    const double done = full_flops * blocks[std::size_t(i)].fraction;  // the masked blocks' share
    const double tm = best[0][std::size_t(i)], tf = best[1][std::size_t(i)];
    total[0] += tm, total[1] += tf;
    fmt::print("{:<22} {:>9.3f} {:>10.1f} {:>6.1f}% {:>9.3f} {:>10.1f} {:>6.1f}% {:>10.2f}x\n", kProducts[std::size_t(i)].name,
               tm * 1e3, done / tm / 1e9, 100.0 * done / tm / 1e9 / peak, tf * 1e3, full_flops / tf / 1e9,
               100.0 * full_flops / tf / 1e9 / peak, tf / tm);
  }
  fmt::print("{:<22} {:>9.3f} {:>29.3f} {:>18.2f}x  (masked blocks do {:.0f}% of the full products' terms)\n", "all six",
             total[0] * 1e3, total[1] * 1e3, total[1] / total[0], 100.0 * blocks[0].fraction);
}

}  // namespace

int main(int argc, char** argv) {
  gg::set_num_threads(1);  // slice_matmul runs on the calling thread inside a chain
  const bool cold = argc > 1 && std::string_view(argv[1]) == "cold";
  if (cold) --argc, ++argv;
  const gg::FmaPeak peak = gg::measure_fma_peak();
  fmt::print("FMA peak {:.1f} GFLOPS on 1 thread ({}, ops/peak.h); {}\n", peak.per_core_gflops, gg::cpu_vector_isa(),
             cold ? "P and dS read cold, (T, T) results a slice each (cold)"
                  : "P and dS rewritten before each slice, (T, T) results in one slice's buffer, as in a chain");
  if (argc >= 5) {
    const int sweeps = argc > 5 ? std::max(1, std::atoi(argv[5])) : 50;
    run(std::atoll(argv[1]), std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4]), sweeps, peak.per_core_gflops,
        !cold);
    return 0;
  }
  run(64, 32, 4, 12, 400, peak.per_core_gflops, !cold);  // the small GPT (bench/gpt_small.json, batch 12)
  run(256, 64, 6, 8, 30, peak.per_core_gflops, !cold);   // the medium GPT (bench/gpt_medium.json, batch 8)
}
