// The compiled fused programs (ops/fuse_compiled.h) keep up with the reference models: every
// group that can be compiled (GELU in either form, layer norm, attention's masked softmax,
// their gradients, residual sums; not the cross-entropy's, whose rows of 65 logits are not
// whole registers) that the main job's GPT, the ViT and the seq2seq model plan for training
// or evaluation runs compiled. When a change to a layer changes its program, this fails
// and prints the line to add to ops/fused_programs.inc. (That compiled and interpreted
// groups agree bit for bit is tests/ops/test_fuse_compiled.cpp's.)
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "models/gpt.h"
#include "models/seq2seq.h"
#include "models/vit.h"
#include "ops/fuse_compiled.h"
#include "train/model.h"

using namespace gg;

namespace {

// The table lines missing for a plan's compilable groups.
void missing_programs(Executor& ex, std::set<std::string>& missing, int& compiled) {
  const Graph& g = ex.planned_graph();
  for (const FusedGroup& grp : ex.fusion().groups) {
    const std::string forms = fused_input_forms(g, grp);
    const std::string line = compiled_entry(grp, forms);
    if (line.empty()) continue;
    if (grp.compiled >= 0) ++compiled;
    else missing.insert(line);
  }
}

train::Batch gpt_batch(const models::GptConfig& c, std::int64_t B) {
  Tensor tokens({B, c.block_size}, DType::i32), targets({B, c.block_size}, DType::i32);
  for (std::int64_t i = 0; i < B * c.block_size; ++i) {
    tokens.i()[i] = std::int32_t(i * 7 % c.vocab_size);
    targets.i()[i] = std::int32_t((i * 5 + 1) % c.vocab_size);
  }
  return {{"tokens", tokens}, {"targets", targets}};
}

}  // namespace

TEST_CASE("fuse_compiled: the reference models' compilable groups all run compiled") {
  if (compiled_count() == 0 || !compiled_by_default()) return;  // a scalar build, or GG_COMPILED=0
  std::set<std::string> missing;
  int compiled = 0;
  for (dsl::GeluKind gelu : {dsl::GeluKind::erf, dsl::GeluKind::tanh}) {
    models::GptConfig c;  // the main job's model
    c.gelu = gelu;
    train::Model m = models::gpt_model(c);
    const train::Batch b = gpt_batch(c, 12);
    for (bool training : {true, false}) missing_programs(m.plan_for(b, training), missing, compiled);
  }
  {
    models::VitConfig c;
    train::Model m = models::vit_model(c);
    Tensor images = Tensor::f32({16, c.image_size, c.image_size}, std::vector<float>(std::size_t(16 * c.image_size * c.image_size), 0.5f));
    Tensor labels({16}, DType::i32);
    for (int i = 0; i < 16; ++i) labels.i()[i] = i % int(c.n_classes);
    for (bool training : {true, false}) missing_programs(m.plan_for({{"images", images}, {"labels", labels}}, training), missing, compiled);
  }
  {
    const models::Seq2SeqTask task = models::number_task(1, 100);
    models::Seq2SeqConfig c = models::seq2seq_defaults();
    c.src_vocab = task.src_vocab, c.tgt_vocab = task.tgt_vocab;
    train::Model m = models::seq2seq_model(c);
    const train::Batch b = models::make_batch(task, std::span(task.held_out).first(16));
    for (bool training : {true, false}) missing_programs(m.plan_for(b, training), missing, compiled);
  }
  std::string lines;
  for (const std::string& l : missing) lines += l + "\n";
  INFO("add to ops/fused_programs.inc:\n" << lines);
  CHECK(missing.empty());
  CHECK(compiled > 0);
}
