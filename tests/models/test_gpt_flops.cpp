// The model FLOPs of a training step (models/gpt_flops.h) against a count by hand.
#include <doctest/doctest.h>

#include "models/gpt_flops.h"
#include "tests/test_util.h"

using namespace gg;

namespace {

// vocab 5, block 4, 1 layer, 2 heads, width 4, biases, learned positions, tied head.
models::GptConfig tiny() {
  models::GptConfig c;
  c.vocab_size = 5;
  c.block_size = 4;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 4;
  return c;
}

}  // namespace

TEST_CASE("gpt_step_flops: 6*N*B*T + 12*L*B*T*T*D with N counted by hand") {
  // tok_emb 5*4 = 20, pos_emb 4*4 = 16, per block: norm1 4+4, query/key/value/proj 4*(4*4+4),
  // norm2 4+4, fc1 4*16+16, fc2 16*4+4 = 8+80+8+80+68 = 244, norm_f 4+4: N = 288.
  const models::StepFlops f = models::gpt_step_flops(tiny(), 2, 3);
  CHECK(f.params == 288);
  CHECK(f.tokens == 6);
  CHECK(f.dense == doctest::Approx(6.0 * 288 * 6));
  CHECK(f.attention == doctest::Approx(12.0 * 1 * 2 * 3 * 3 * 4));  // 864
  CHECK(f.total == doctest::Approx(10368 + 864));
  CHECK(gg::test::contains(f.formula, "6*288*2*3 + 12*1*2*3*3*4"));
}

TEST_CASE("gpt_step_flops: a tied head is counted once, an untied one adds its matrix") {
  models::GptConfig c = tiny();
  c.tie_weights = false;  // head.weight (5, 4), no bias: 20 more
  CHECK(models::gpt_step_flops(c, 1, 4).params == 288 + 20);
  c.tie_weights = true;
  c.bias = false;  // no linear biases (4*4 + 16 + 4 = 36) and no norm biases (3*4 = 12)
  CHECK(models::gpt_step_flops(c, 1, 4).params == 288 - 36 - 12);
}

TEST_CASE("gpt_step_flops: a batch or sequence the model cannot take is refused") {
  CHECK_THROWS_AS(models::gpt_step_flops(tiny(), 0, 3), train::InputError);
  CHECK_THROWS_AS(models::gpt_step_flops(tiny(), 1, 5), train::InputError);
}
