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
#include "tests/models/gpt_case.h"

using namespace gg;


TEST_CASE("fuse: the reference GPT's loss, logits and gradients are unchanged by fusion, at 1 and 2 threads") {
  for (const char* config : gg::test::kGoldenConfigs)
    for (bool training : {false, true}) {
      CAPTURE(config);
      CAPTURE(training);
      const auto gpt = gg::test::gpt_case(config, training);
      const Graph& g = gpt->g;
      const std::vector<NodeId>& outs = gpt->outs;
      ParamStore ps;
      ps.init_missing(g, 11);
      std::vector<Tensor> want;
      std::size_t bytes[2] = {};
      const int before = num_threads();
      for (int threads : {1, 2})
        for (bool fuse : {false, true}) {
          set_num_threads(threads);
          Executor ex(g, outs, ps, 5, {.simplify = true, .fuse = fuse});
          bytes[fuse] = ex.unshared_bytes();
          CHECK(ex.fusion().groups.empty() != fuse);
          for (const auto& [name, t] : gpt->feeds) ex.set_input(name, t);
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
