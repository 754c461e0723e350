// Batch-slice chains (ExecutorOptions::slice) change no result: a GPT whose attention
// chains are sliced (T = 32, so every slice's rows start on a SIMD register boundary)
// gives the same loss, logits and gradients, bit for bit, as the plan run step by step,
// with dropout on and off, at 1 and 2 threads, with the head split and merge permutes done
// in place or run, and in anomaly mode (which runs step by step).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "models/gpt.h"
#include "ops/cpu/parallel.h"
#include "tests/models/gpt_case.h"

using namespace gg;

TEST_CASE("slice: a GPT's loss, logits and gradients are unchanged by batch-slice chains") {
  for (float dropout : {0.f, 0.1f})
    for (std::int64_t T : {32, 48}) {
      CAPTURE(dropout);
      CAPTURE(T);
      models::GptConfig c;
      c.vocab_size = 13;
      c.block_size = T;
      c.n_layer = 2;
      c.n_head = 2;
      c.n_embd = 16;
      c.dropout = dropout;
      Graph g;
      models::Gpt m = models::build_gpt(g, c, 3, T, true, dropout > 0);
      std::vector<NodeId> outs = {m.loss.id, m.logits.id}, wrt;
      for (auto& p : m.params) wrt.push_back(p.id);
      for (NodeId d : gg::grad(g, m.loss.id, wrt)) outs.push_back(d);
      const Tensor tokens = gg::test::pattern_tokens(3, T, 13, 0), targets = gg::test::pattern_tokens(3, T, 13, 5);
      ParamStore ps;
      ps.init_missing(g, 4);
      std::vector<Tensor> want;
      const int before = num_threads();
      std::size_t unshared0 = 0, unshared1 = 0;
      for (int threads : {1, 2, 3})
        for (int mode : {0, 1, 2, 3}) {  // step by step, sliced, sliced in place, that in anomaly mode
          set_num_threads(threads);
          Executor ex(g, outs, ps, 9, {.slice = mode > 0, .in_place = mode >= 2});
          // Per layer, forward: q, k, v's head split and the merge of the heads' outputs;
          // backward: the merge's gradient read by two products, and q, k, v's gradients
          // merged: 8 permutes neither run nor stored.
          CHECK(ex.in_place_permutes() == (mode >= 2 ? 8 * std::size_t(c.n_layer) : 0));
          if (mode > 0) CHECK(ex.slice_chains() >= 4);  // forward and backward attention, both layers
          // The (T, T) values only a slice's own pass reads live in per-thread scratch, not
          // the arena (2 layers: 3 each here; the step-by-step plan stores them all).
          if (mode > 0) CHECK(ex.chain_local_values() >= 2 * std::size_t(c.n_layer));
          if (mode == 0) unshared0 = ex.unshared_bytes();
          else CHECK(ex.unshared_bytes() < unshared0);
          if (mode == 1) unshared1 = ex.unshared_bytes();
          if (mode >= 2) CHECK(ex.unshared_bytes() < unshared1);  // the permutes' values take no place
          ex.set_detect_anomaly(mode == 3);
          ex.set_input("tokens", tokens);
          ex.set_input("targets", targets);
          ex.run();
          test::check_same_bits(ex, g, outs, want, "threads " + std::to_string(threads) + " mode " + std::to_string(mode));
        }
      set_num_threads(before);
    }
}
