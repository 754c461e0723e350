// Tests for the reference model's files: weights checked against the config's parameter
// table (all problems in one message), batches checked against the config, and the
// parameter table itself against docs/reference-model.md.
#include "models/gpt.h"
#include "train/checkpoint.h"

#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"

namespace {

using namespace gg;
using train::InputError;

std::string golden(const std::string& file) { return std::string(GG_SOURCE_DIR) + "/tests/golden/" + file; }

using gg::test::contains;

models::GptConfig basic_config() { return models::load_gpt_config(golden("ref_basic.config.json")); }

std::string weights_error(const io::File& f, const models::GptConfig& c, bool allow_extra = false) {
  try {
    ParamStore ps;
    train::load_params(ps, train::tensors_of(f), models::gpt_params(c), f.path, allow_extra);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

io::File batch_file(Shape shape, std::vector<std::int32_t> tokens, std::vector<std::int32_t> targets) {
  io::File f;
  f.path = "batch.safetensors";
  f.add_i32("tokens", shape, tokens);
  f.add_i32("targets", shape, targets);
  return f;
}

std::string batch_error(const io::File& f, const models::GptConfig& c, bool stacked) {
  try {
    models::read_gpt_batches(f, c, stacked);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// An I64 entry holding `values`.
io::Entry i64(Shape shape, const std::vector<std::int64_t>& values) {
  io::Entry e;
  e.dtype = io::DType::i64;
  e.shape = std::move(shape);
  e.data.resize(values.size() * 8);
  for (std::size_t i = 0; i < values.size(); ++i)
    for (int k = 0; k < 8; ++k) e.data[i * 8 + std::size_t(k)] = std::byte((std::uint64_t(values[i]) >> (8 * k)) & 0xff);
  return e;
}

}  // namespace

TEST_CASE("load_weights accepts the golden weights and refuses mismatches, listing all of them") {
  const models::GptConfig c = basic_config();
  const io::File good = io::read_safetensors(golden("ref_basic.weights.safetensors"));
  {
    ParamStore ps;
    train::load_params(ps, train::tensors_of(good), models::gpt_params(c), good.path);
    CHECK(ps.all().size() == models::gpt_params(c).size());
    CHECK(ps.at("tok_emb.weight").shape() == Shape{13, 16});
    CHECK(ps.at("blocks.1.mlp.fc2.bias").f()[0] == good.get_f32("blocks.1.mlp.fc2.bias")[0]);
  }

  // Two missing, one unexpected, two mis-shaped (one by shape, one by dtype): one message,
  // naming the first mis-shaped one and counting the other.
  io::File bad;
  bad.path = "bad.safetensors";
  for (auto& [name, e] : good.tensors) {
    if (name == "blocks.0.attn.key.bias" || name == "norm_f.weight") continue;
    if (name == "blocks.1.mlp.fc1.weight") {
      bad.add_f32(name, {16, 64}, std::vector<float>(16 * 64));
      continue;
    }
    if (name == "pos_emb.weight") {
      bad.add_i32(name, {8, 16}, std::vector<std::int32_t>(8 * 16));
      continue;
    }
    bad.add(name, e);
  }
  bad.add_f32("head.weight", {13, 16}, std::vector<float>(13 * 16));
  const std::string m = weights_error(bad, c);
  INFO(m);
  CHECK(contains(m, "bad.safetensors"));
  CHECK(contains(m, "missing [blocks.0.attn.key.bias, norm_f.weight]"));
  CHECK(contains(m, "unexpected [head.weight]"));
  CHECK(contains(m, "mis-shaped"));
  CHECK(contains(m, "mis-shaped [pos_emb.weight is i32(8, 16) but the model needs f32(8, 16) and 1 more]"));
  CHECK(m.size() <= 280);
  CHECK(m.find('\n') == std::string::npos);

  // allow_extra: extra names pass, the rest is still refused.
  io::File extra = good;
  extra.add_f32("optim.something", {2}, {1, 2});
  CHECK(weights_error(extra, c) != "");
  CHECK(contains(weights_error(extra, c), "unexpected [optim.something]"));
  CHECK(weights_error(extra, c, /*allow_extra=*/true) == "");

  // The same weights under another config: what differs is named, past three counted.
  models::GptConfig untied = c;
  untied.tie_weights = false;
  CHECK(contains(weights_error(good, untied), "missing [head.weight]"));
  models::GptConfig no_bias = c;
  no_bias.bias = false;
  const std::string nb = weights_error(good, no_bias);
  CHECK(contains(nb, "unexpected [blocks.0.attn.key.bias"));
  CHECK(contains(nb, "and 14 more]"));  // 17 biases: long lists are counted, not spelled out
}


TEST_CASE("read_gpt_batches") {
  const models::GptConfig c = basic_config();  // V = 13, block_size = 8

  SUBCASE("the golden batches") {
    const auto b = models::read_gpt_batches(io::read_safetensors(golden("ref_basic.batch.safetensors")), c, false);
    REQUIRE(b.size() == 1);
    CHECK(b[0].at("tokens").shape() == Shape{3, 8});
    CHECK(b[0].at("targets").dtype() == DType::i32);
    const auto s = models::read_gpt_batches(io::read_safetensors(golden("ref_basic.batches.safetensors")), c, true);
    CHECK(s.size() == 5);
    const io::File stacked = io::read_safetensors(golden("ref_basic.batches.safetensors"));
    CHECK(s[4].at("tokens").i()[0] == stacked.get_i32("tokens")[4 * 3 * 8]);
    // A stacked file is not a single batch and the other way round.
    CHECK(contains(batch_error(io::read_safetensors(golden("ref_basic.batches.safetensors")), c, false), "rank 2"));
    CHECK(contains(batch_error(io::read_safetensors(golden("ref_basic.batch.safetensors")), c, true), "rank 3"));
  }
  SUBCASE("values and shapes") {
    const io::File ok = batch_file({2, 3}, {0, 1, 12, 3, 4, 5}, {1, -1, 2, -1, -1, 0});
    const auto b = models::read_gpt_batches(ok, c, false);
    CHECK(std::vector<std::int32_t>(b[0].at("tokens").i(), b[0].at("tokens").i() + 6) ==
          std::vector<std::int32_t>{0, 1, 12, 3, 4, 5});
    CHECK(std::vector<std::int32_t>(b[0].at("targets").i(), b[0].at("targets").i() + 6) ==
          std::vector<std::int32_t>{1, -1, 2, -1, -1, 0});

    std::string m = batch_error(batch_file({2, 3}, {0, 1, 13, 3, 4, 5}, {1, 1, 1, 1, 1, 1}), c, false);
    CHECK(contains(m, "batch.safetensors"));
    CHECK(contains(m, "'tokens' holds 13"));
    CHECK(contains(batch_error(batch_file({2, 3}, {0, -1, 1, 3, 4, 5}, {1, 1, 1, 1, 1, 1}), c, false), "'tokens' holds -1"));
    m = batch_error(batch_file({2, 3}, {0, 1, 2, 3, 4, 5}, {1, 1, -2, 1, 1, 1}), c, false);
    CHECK(contains(m, "'targets' holds -2"));
    CHECK(contains(batch_error(batch_file({2, 3}, {0, 1, 2, 3, 4, 5}, {1, 1, 13, 1, 1, 1}), c, false),
                   "'targets' holds 13"));
    m = batch_error(batch_file({2, 3}, {0, 1, 2, 3, 4, 5}, {-1, -1, -1, -1, -1, -1}), c, false);
    CHECK(contains(m, "no target that is not -1"));
    // Stacked: the batch without a target is named.
    m = batch_error(batch_file({2, 1, 3}, {0, 1, 2, 3, 4, 5}, {1, 2, 3, -1, -1, -1}), c, true);
    CHECK(contains(m, "batch 1"));
    m = batch_error(batch_file({1, 9}, std::vector<std::int32_t>(9, 1), std::vector<std::int32_t>(9, 1)), c, false);
    CHECK(contains(m, "sequence length 9 exceeds block_size 8"));
    CHECK(contains(batch_error(batch_file({6}, {0, 1, 2, 3, 4, 5}, {1, 1, 1, 1, 1, 1}), c, false), "rank 2"));
    CHECK(contains(batch_error(batch_file({1, 2, 3}, {0, 1, 2, 3, 4, 5}, {1, 1, 1, 1, 1, 1}), c, false), "rank 2"));
    CHECK(contains(batch_error(batch_file({0, 3}, {}, {}), c, false), "empty"));

    io::File mismatch;
    mismatch.path = "mm.safetensors";
    mismatch.add_i32("tokens", {2, 3}, {0, 1, 2, 3, 4, 5});
    mismatch.add_i32("targets", {3, 2}, {0, 1, 2, 3, 4, 5});
    CHECK(contains(batch_error(mismatch, c, false), "'targets' has shape"));
    io::File missing;
    missing.path = "missing.safetensors";
    missing.add_i32("tokens", {2, 3}, {0, 1, 2, 3, 4, 5});
    CHECK(contains(batch_error(missing, c, false), "'targets'"));
    io::File floats;
    floats.path = "floats.safetensors";
    floats.add_f32("tokens", {1, 2}, {0, 1});
    floats.add_i32("targets", {1, 2}, {0, 1});
    CHECK(contains(batch_error(floats, c, false), "floats.safetensors"));
  }
  SUBCASE("I64 tokens are accepted; values beyond 32 bits are refused") {
    io::File f;
    f.path = "i64.safetensors";
    f.add("tokens", i64({1, 4}, {0, 5, 12, 7}));
    f.add("targets", i64({1, 4}, {5, -1, 7, 3}));
    const auto b = models::read_gpt_batches(f, c, false);
    CHECK(std::vector<std::int32_t>(b[0].at("tokens").i(), b[0].at("tokens").i() + 4) ==
          std::vector<std::int32_t>{0, 5, 12, 7});
    CHECK(std::vector<std::int32_t>(b[0].at("targets").i(), b[0].at("targets").i() + 4) ==
          std::vector<std::int32_t>{5, -1, 7, 3});

    io::File big;
    big.path = "big.safetensors";
    big.add("tokens", i64({1, 2}, {0, std::int64_t(1) << 32}));  // would wrap to 0 if truncated
    big.add("targets", i64({1, 2}, {1, 1}));
    CHECK(contains(batch_error(big, c, false), "big.safetensors"));
  }
}

TEST_CASE("gpt_params (from declaring the model) matches the spec's table") {
  models::GptConfig c;
  c.vocab_size = 11;
  c.block_size = 7;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 6;
  const std::int64_t V = 11, D = 6, BS = 7;

  // The table written out from docs/reference-model.md.
  auto expected = [&](bool bias, bool tied, bool learned) {
    std::vector<std::pair<std::string, Shape>> p;
    p.push_back({"tok_emb.weight", {V, D}});
    if (learned) p.push_back({"pos_emb.weight", {BS, D}});
    for (int i = 0; i < 2; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".";
      p.push_back({b + "norm1.weight", {D}});
      if (bias) p.push_back({b + "norm1.bias", {D}});
      for (const char* n : {"query", "key", "value", "proj"}) {
        p.push_back({b + "attn." + n + ".weight", {D, D}});
        if (bias) p.push_back({b + "attn." + n + ".bias", {D}});
      }
      p.push_back({b + "norm2.weight", {D}});
      if (bias) p.push_back({b + "norm2.bias", {D}});
      p.push_back({b + "mlp.fc1.weight", {4 * D, D}});
      if (bias) p.push_back({b + "mlp.fc1.bias", {4 * D}});
      p.push_back({b + "mlp.fc2.weight", {D, 4 * D}});
      if (bias) p.push_back({b + "mlp.fc2.bias", {D}});
    }
    p.push_back({"norm_f.weight", {D}});
    if (bias) p.push_back({"norm_f.bias", {D}});
    if (!tied) p.push_back({"head.weight", {V, D}});
    return p;
  };
  for (bool bias : {true, false})
    for (bool tied : {true, false})
      for (bool learned : {true, false}) {
        c.bias = bias;
        c.tie_weights = tied;
        c.pos_encoding = learned ? models::GptConfig::Pos::learned : models::GptConfig::Pos::sinusoidal;
        INFO("bias " << bias << ", tied " << tied << ", learned " << learned);
        const auto got = models::gpt_params(c);
        const auto want = expected(bias, tied, learned);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          CHECK(got[i].name == want[i].first);
          CHECK(got[i].shape == want[i].second);
        }
        // The model's graph declares exactly these parameters, in this order.
        Graph g;
        const models::Gpt m = models::build_gpt(g, c, 1, 3);
        REQUIRE(m.params.size() == want.size());
        for (std::size_t i = 0; i < want.size(); ++i) {
          CHECK(m.params[i].name() == want[i].first);
          CHECK(m.params[i].shape() == want[i].second);
        }
      }
}
