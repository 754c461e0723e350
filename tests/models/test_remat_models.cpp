// The rematerialization pass (ops/passes/remat.h) changes no result: the reference GPT on the
// golden configs gives the same loss, logits and every parameter's gradient, bit for bit,
// from the rematerialized graph as from the original (with a threshold low enough that the
// small golden shapes get copies), with dropout on and off, at 1 and 2 threads, in less
// memory.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/runtime/executor.h"
#include "ops/cpu/parallel.h"
#include "ops/passes/remat.h"
#include "tests/models/gpt_case.h"

using namespace gg;

TEST_CASE("remat: the reference GPT's loss, logits and gradients are unchanged, in a smaller arena") {
  for (const char* config : gg::test::kGoldenConfigs)
    for (bool training : {false, true}) {
      CAPTURE(config);
      CAPTURE(training);
      const auto gpt = gg::test::gpt_case(config, training);
      const Simplified s = simplify(gpt->g, gpt->outs);
      const Rematerialized r = rematerialize(s.graph, s.roots, {.min_elements = 1});
      CHECK(r.stats.copied > 0);
      ParamStore ps;
      ps.init_missing(gpt->g, 11);
      const int before = num_threads();
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::size_t arena[2] = {};
        std::vector<Tensor> got[2];
        for (bool remat : {false, true}) {
          const Graph& g = remat ? r.graph : s.graph;
          const std::vector<NodeId>& outs = remat ? r.roots : s.roots;
          Executor ex(g, outs, ps, 5, {.simplify = false, .fuse = true, .remat = false});
          arena[remat] = ex.arena_bytes();
          for (const auto& [name, t] : gpt->feeds) ex.set_input(name, t);
          ex.run();
          for (NodeId o : outs) got[remat].push_back(ex.get(o));
        }
        REQUIRE(got[0].size() == got[1].size());
        for (std::size_t o = 0; o < got[0].size(); ++o) {
          INFO("output " << o << " threads " << threads);
          CHECK(std::memcmp(got[0][o].data(), got[1][o].data(), std::size_t(got[0][o].numel()) * 4) == 0);
        }
        CHECK(arena[1] < arena[0]);
      }
      set_num_threads(before);
    }
}
