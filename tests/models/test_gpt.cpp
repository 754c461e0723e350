// Tests for models/gpt.cpp: the reference model's graph has the spec's parameters (names,
// shapes, table order) for every option, the documented output shapes, dropout only when
// training, and refuses sequences longer than block_size.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "models/gpt.h"

using namespace gg;
using namespace gg::dsl;
using namespace gg::models;

namespace {
int count_op(const Graph& g, OpKind k) {
  int n = 0;
  for (const Node& x : g.nodes()) n += x.op == k;
  return n;
}
}  // namespace

TEST_CASE("build_gpt declares exactly the spec's parameters, in table order, for every option") {
  for (bool bias : {true, false})
    for (bool tie : {true, false})
      for (auto pos : {GptConfig::Pos::learned, GptConfig::Pos::sinusoidal}) {
        CAPTURE(bias);
        CAPTURE(tie);
        GptConfig c;
        c.vocab_size = 11;
        c.block_size = 8;
        c.n_layer = 2;
        c.n_head = 2;
        c.n_embd = 6;
        c.bias = bias;
        c.tie_weights = tie;
        c.pos_encoding = pos;
        Graph g;
        Gpt m = build_gpt(g, c, 3, 5);
        auto table = gpt_params(c);
        REQUIRE(m.params.size() == table.size());
        CHECK(count_op(g, OpKind::param) == int(table.size()));
        for (std::size_t i = 0; i < table.size(); ++i) {
          CHECK(m.params[i].name() == table[i].name);
          CHECK(m.params[i].shape() == table[i].shape);
        }
        CHECK((g.find("head.weight", OpKind::param) >= 0) == !tie);
        CHECK((g.find("pos_emb.weight", OpKind::param) >= 0) == (pos == GptConfig::Pos::learned));
        CHECK((g.find("blocks.1.mlp.fc2.bias", OpKind::param) >= 0) == bias);
        CHECK(m.logits.shape() == Shape{3, 5, 11});
        CHECK(m.loss.shape().empty());
        CHECK(m.loss.name() == "loss");
        CHECK(g.node(g.find("tokens", OpKind::input)).dtype == DType::i32);
        CHECK(g.node(g.find("targets", OpKind::input)).shape == Shape{3, 5});
      }
}

TEST_CASE("the spec's table for the default model: 4 layers of 16 tensors around the embeddings") {
  GptConfig c;  // V 65, block 64, 4 layers, D 128, bias, learned, tied
  auto t = gpt_params(c);
  CHECK(t.size() == 2 + 4 * 16 + 2);
  CHECK(t.front().name == "tok_emb.weight");
  CHECK(t.front().shape == Shape{65, 128});
  CHECK(t[2].name == "blocks.0.norm1.weight");
  CHECK(t[4].name == "blocks.0.attn.query.weight");
  CHECK(t[4].shape == Shape{128, 128});
  CHECK(t.back().name == "norm_f.bias");
}

TEST_CASE("the residual projections start at N(0, 0.02 / sqrt(2 n_layer)), declared with the model") {
  GptConfig c;
  c.n_layer = 8;
  Graph g;
  build_gpt(g, c, 1, 4);
  const float want = float(0.02 / std::sqrt(16.0));
  for (const char* name : {"blocks.3.attn.proj.weight", "blocks.7.mlp.fc2.weight"}) {
    const Init& init = g.node(g.find(name, OpKind::param)).attrs.init;
    CHECK(init.kind == Init::normal);
    CHECK(init.b == doctest::Approx(want));
  }
  for (const char* name : {"blocks.3.attn.query.weight", "blocks.3.mlp.fc1.weight", "tok_emb.weight"})
    CHECK(g.node(g.find(name, OpKind::param)).attrs.init.b == doctest::Approx(0.02f));
  // Every command builds this model: the trainable one declares the same initializers.
  train::Model m = gpt_model(c);
  m.declare({{"tokens", Tensor({1, 4}, DType::i32)}});
  m.init_params(1);
  ParamStore direct;
  direct.init_missing(g, 1);
  CHECK(m.params().at("blocks.7.mlp.fc2.weight").to_vector() == direct.at("blocks.7.mlp.fc2.weight").to_vector());
}

TEST_CASE("dropout nodes exist only when training with p > 0; T > block_size is refused") {
  GptConfig c;
  c.vocab_size = 7;
  c.block_size = 4;
  c.n_layer = 1;
  c.n_head = 1;
  c.n_embd = 4;
  c.dropout = 0.1f;
  Graph train_g, eval_g;
  build_gpt(train_g, c, 2, 4, true, /*training=*/true);
  build_gpt(eval_g, c, 2, 4, true, /*training=*/false);
  CHECK(count_op(train_g, OpKind::random) == 1);
  CHECK(count_op(eval_g, OpKind::random) == 0);
  Graph g;
  CHECK_THROWS_WITH_AS(build_gpt(g, c, 1, 5), doctest::Contains("sequence length 5 must be in [1, block_size = 4]"),
                       GraphError);
  Graph g2;
  Gpt no_loss = build_gpt(g2, c, 1, 3, /*with_loss=*/false);
  CHECK(no_loss.loss.g == nullptr);
  CHECK(no_loss.logits.shape() == Shape{1, 3, 7});
}
