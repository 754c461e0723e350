// One training step of the reference model (forward, backward, clipping, AdamW), timed
// for gradgraph and, in the same run, for PyTorch (bench/torch_train_step.py with Debian's
// python3-torch) on the same sizes and thread count; prints both and the ratio, then
// gradgraph's per-op profile. Usage: bench_train_step [steps] (default 20).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "autodiff/optim.h"
#include "ops/parallel.h"
#include "models/gpt.h"

using namespace gg;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  models::GptConfig c;  // the main job's model: 4 layers, 4 heads, 128 wide, block 64, vocab 65
  const std::int64_t B = 12, T = c.block_size;
  train::Model r = models::gpt_model(c);
  AdamW opt({0.9, 0.99, 1e-8, 0.1});
  std::mt19937_64 rng(0);
  std::vector<std::int32_t> x(std::size_t(B * T)), y(std::size_t(B * T));
  for (auto& v : x) v = std::int32_t(rng() % std::uint64_t(c.vocab_size));
  for (auto& v : y) v = std::int32_t(rng() % std::uint64_t(c.vocab_size));
  const train::Batch batch{{"tokens", Tensor::i32({B, T}, x)}, {"targets", Tensor::i32({B, T}, y)}};
  r.declare(batch);
  r.init_params(1);
  std::vector<double> ms;
  for (int i = 0; i < steps + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    r.forward_backward(batch);
    auto pg = r.grads();
    opt.step(pg, 1e-3, clip_scale(grad_norm(pg), 1.0));  // as the trainer clips
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double ours = ms[ms.size() / 2];

  // PyTorch at its best: Debian's build runs OpenMP threads over a threaded OpenBLAS,
  // which oversubscribes the cores, so each thread setting is tried and the fastest kept.
  double torch_ms = 0;
  std::string torch_cfg;
  for (int t : {1, num_threads()}) {
    for (const char* env : {"OPENBLAS_NUM_THREADS=1", ""}) {
      const std::string cmd = fmt::format("{} /usr/bin/python3 {}/bench/torch_train_step.py {} {} {} {} {} {} {} {} 2>/dev/null",
                                          env, GG_SOURCE_DIR, c.n_layer, c.n_head, c.n_embd, c.block_size, B,
                                          c.vocab_size, steps, t);
      double ms = 0;
      if (std::FILE* p = popen(cmd.c_str(), "r")) {
        char buf[256];
        while (std::fgets(buf, sizeof buf, p)) std::sscanf(buf, "torch_ms_per_step %lf", &ms);
        pclose(p);
      }
      if (ms > 0 && (torch_ms == 0 || ms < torch_ms)) {
        torch_ms = ms;
        torch_cfg = fmt::format("torch.set_num_threads({}){}{}", t, *env ? ", " : "", env);
      }
    }
  }
  fmt::print("training step, reference model (L=4 H=4 D=128 T=64 B=12 V=65), {} threads, median of {}\n",
             num_threads(), steps);
  fmt::print("  gradgraph  {:8.2f} ms/step  {:8.0f} tokens/s\n", ours, double(B * T) / ours * 1e3);
  if (torch_ms > 0) {
    fmt::print("  pytorch    {:8.2f} ms/step  {:8.0f} tokens/s  (best of 4 settings: {})\n", torch_ms,
               double(B * T) / torch_ms * 1e3, torch_cfg);
    fmt::print("  speed-up   {:8.2f}x (pytorch time / gradgraph time)\n", torch_ms / ours);
  } else {
    fmt::print("  pytorch    unavailable (needs /usr/bin/python3 with python3-torch)\n");
  }
  // Where gradgraph's time goes.
  Executor& plan = r.last_train_plan();
  plan.set_profile(true);
  for (int i = 0; i < steps; ++i) r.forward_backward(batch);
  fmt::print("\nper-op profile over {} forward+backward runs:\n{}", steps, plan.profile_report());
  return 0;
}
