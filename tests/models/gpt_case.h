// The reference GPT as a test case for comparing plans (a pass on and off, 1 and 2 threads):
// the graph of a golden config (dropout on when training), its outputs (loss, logits and
// every parameter's gradient) and a fixed batch. Shared by tests/models/test_*_models.cpp.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autodiff/grad.h"
#include "models/gpt.h"
#include "ops/runtime/executor.h"

namespace gg::test {

inline constexpr const char* kGoldenConfigs[] = {"tests/golden/ref_basic.config.json", "tests/golden/ref_odd.config.json",
                                                 "tests/golden/ref_sinus.config.json"};

// (B, T) token ids in [0, V), a fixed pattern shifted by `salt`.
inline Tensor pattern_tokens(std::int64_t B, std::int64_t T, std::int32_t V, int salt) {
  Tensor t({B, T}, DType::i32);
  for (std::int64_t i = 0; i < B * T; ++i) t.i()[i] = std::int32_t((i * 7 + salt) % V);
  return t;
}

struct GptCase {
  models::GptConfig config;
  Graph g;
  std::vector<NodeId> outs;                           // loss, logits, then every gradient
  std::vector<std::pair<std::string, Tensor>> feeds;  // tokens and targets, (2, block_size)
};

// Heap-allocated: outputs refer to the graph by id, and the graph must not move.
inline std::unique_ptr<GptCase> gpt_case(const std::string& config_path, bool training) {
  auto c = std::make_unique<GptCase>();
  c->config = models::load_gpt_config(config_path);
  if (training) c->config.dropout = 0.1f;  // dropout's random nodes, drawn in the same order
  const std::int64_t T = c->config.block_size;
  const auto V = std::int32_t(c->config.vocab_size);
  models::Gpt m = models::build_gpt(c->g, c->config, 2, T, true, training);
  std::vector<NodeId> wrt;
  for (auto& p : m.params) wrt.push_back(p.id);
  c->outs = {m.loss.id, m.logits.id};
  for (NodeId d : gg::grad(c->g, m.loss.id, wrt)) c->outs.push_back(d);
  c->feeds = {{"tokens", pattern_tokens(2, T, V, 0)}, {"targets", pattern_tokens(2, T, V, 3)}};
  return c;
}

// Checks each output of a run of `ex` bit for bit against the first run's, kept in `want`
// (the first call fills it); `run` names this run in a failure.
inline void check_same_bits(const Executor& ex, const Graph& g, const std::vector<NodeId>& outs,
                            std::vector<Tensor>& want, const std::string& run) {
  for (std::size_t o = 0; o < outs.size(); ++o) {
    const Tensor t = ex.get(outs[o]);
    if (want.size() <= o) want.push_back(t);
    INFO("output " << o << " '" << g.node(outs[o]).name << "' " << run);
    CHECK(std::memcmp(t.data(), want[o].data(), std::size_t(t.numel()) * 4) == 0);
  }
}

}  // namespace gg::test
