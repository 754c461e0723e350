// The element-wise fusion pass (ops/fuse.h) changes no result: the reference GPT on the
// golden configs gives the same loss, logits and every parameter's gradient with fusion
// on and off, bit for bit (each fused member runs its op's own element function on the
// same SIMD/scalar split, with no reassociation), at 1 and 2 threads, storing fewer values.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "models/gpt.h"
#include "ops/parallel.h"

using namespace gg;

namespace {

Tensor tokens(std::int64_t B, std::int64_t T, std::int32_t V, int salt) {
  Tensor t({B, T}, DType::i32);
  for (std::int64_t i = 0; i < B * T; ++i) t.i()[i] = std::int32_t((i * 7 + salt) % V);
  return t;
}

}  // namespace

TEST_CASE("fuse: the reference GPT's loss, logits and gradients are unchanged by fusion, at 1 and 2 threads") {
  for (const char* config : {"tests/golden/ref_basic.config.json", "tests/golden/ref_odd.config.json",
                             "tests/golden/ref_sinus.config.json"})
    for (bool training : {false, true}) {  // training: dropout's random nodes, drawn in the same order
      CAPTURE(config);
      CAPTURE(training);
      models::GptConfig c = models::load_gpt_config(config);
      if (training) c.dropout = 0.1f;
      Graph g;
      models::Gpt m = models::build_gpt(g, c, 2, c.block_size, true, training);
      std::vector<NodeId> wrt, outs{m.loss.id, m.logits.id};
      for (auto& p : m.params) wrt.push_back(p.id);
      for (NodeId d : gg::grad(g, m.loss.id, wrt)) outs.push_back(d);
      ParamStore ps;
      ps.init_missing(g, 11);
      const Tensor x = tokens(2, c.block_size, std::int32_t(c.vocab_size), 0);
      const Tensor y = tokens(2, c.block_size, std::int32_t(c.vocab_size), 3);
      std::vector<Tensor> want;
      std::size_t bytes[2] = {};
      const int before = num_threads();
      for (int threads : {1, 2})
        for (bool fuse : {false, true}) {
          set_num_threads(threads);
          Executor ex(g, outs, ps, 5, {.simplify = true, .fuse = fuse});
          bytes[fuse] = ex.unshared_bytes();
          CHECK(ex.fusion().groups.empty() != fuse);
          ex.set_input("tokens", x);
          ex.set_input("targets", y);
          ex.run();
          for (std::size_t o = 0; o < outs.size(); ++o) {
            const Tensor t = ex.get(outs[o]);
            if (want.size() <= o) want.push_back(t);
            INFO("output " << o << " '" << g.node(outs[o]).name << "' threads " << threads << " fuse " << fuse);
            CHECK(std::memcmp(t.data(), want[o].data(), std::size_t(t.numel()) * 4) == 0);
          }
        }
      set_num_threads(before);
      CHECK(bytes[1] < bytes[0]);  // fewer values stored (the peak may not drop: a group's inputs live until its root)
    }
}
