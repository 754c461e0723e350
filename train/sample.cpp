// Sampling: a forward-only plan for one (1, block_size) window, run once per new token.
#include "train/sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ops/executor.h"
#include "train/config.h"
#include "train/data.h"

namespace gg::train {

std::string sample_text(const dsl::GptConfig& c, ParamStore& params, const std::string& vocab, const SampleOptions& o) {
  if (!(o.temperature > 0)) throw InputError(fmt::format("--temperature must be > 0, got {}", o.temperature));
  if (o.top_k < 0) throw InputError(fmt::format("--top-k must be >= 0, got {}", o.top_k));
  if (o.tokens < 0) throw InputError(fmt::format("--tokens must be >= 0, got {}", o.tokens));
  CharData d;
  d.vocab = vocab;
  std::vector<std::int32_t> ids;
  try {
    ids = d.encode(o.prompt);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--prompt: {}", e.what()));
  }
  if (ids.empty()) ids.push_back(0);
  const std::int64_t T = c.block_size, V = c.vocab_size;
  Graph g;
  dsl::Gpt m = dsl::build_gpt(g, c, 1, T, /*with_loss=*/false, /*training=*/false);
  Executor ex(g, {m.logits.id}, params);
  std::mt19937_64 rng(o.seed);
  std::vector<std::int32_t> window(static_cast<std::size_t>(T), 0);
  std::vector<double> p(static_cast<std::size_t>(V));
  for (std::int64_t step = 0; step < o.tokens; ++step) {
    // The causal mask lets position len-1 see only the real tokens before it.
    const std::int64_t len = std::min<std::int64_t>(T, std::int64_t(ids.size()));
    std::fill(window.begin(), window.end(), 0);
    std::copy(ids.end() - len, ids.end(), window.begin());
    ex.set_input("tokens", std::span<const std::int32_t>(window));
    ex.run();
    const float* logits = ex.value(m.logits.id).f() + (len - 1) * V;  // logits: (V)
    double mx = -INFINITY;
    for (std::int64_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[v]) / o.temperature);
    for (std::int64_t v = 0; v < V; ++v) p[std::size_t(v)] = std::exp(double(logits[v]) / o.temperature - mx);
    if (o.top_k > 0 && o.top_k < V) {
      std::vector<double> sorted = p;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
      const double kth = sorted[std::size_t(o.top_k - 1)];
      for (double& x : p)
        if (x < kth) x = 0;
    }
    std::discrete_distribution<std::int32_t> pick(p.begin(), p.end());
    ids.push_back(pick(rng));
  }
  return o.prompt + d.decode(std::vector<std::int32_t>(ids.end() - o.tokens, ids.end()));
}

}  // namespace gg::train
