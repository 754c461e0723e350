// Tests for train/config (the model config JSON of docs/reference-model.md) and the
// validation of train::TrainOptions: every refusal is an InputError naming the key.
#include "train/config.h"

#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "train/trainer.h"

namespace {

using namespace gg;
using nlohmann::json;
using train::InputError;

const json kValid = {{"vocab_size", 65}, {"block_size", 64}, {"n_layer", 2},      {"n_head", 4},
                     {"n_embd", 64},     {"bias", true},     {"pos_encoding", "learned"},
                     {"tie_weights", true}, {"gelu", "erf"}, {"layernorm_eps", 1e-5}};

// The message of the InputError that parsing `j` throws ("" when it does not throw).
std::string config_error(const std::string& text) {
  try {
    train::parse_config(text, "model.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

using gg::test::contains;

std::string options_error(const std::string& text) {
  try {
    train::TrainOptions o;
    o.merge_json(text, "opts.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string validate_error(const train::TrainOptions& o) {
  try {
    o.validate();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parse_config: a valid config") {
  const dsl::GptConfig c = train::parse_config(kValid.dump(), "model.json");
  CHECK(c.vocab_size == 65);
  CHECK(c.block_size == 64);
  CHECK(c.n_layer == 2);
  CHECK(c.n_head == 4);
  CHECK(c.n_embd == 64);
  CHECK(c.bias);
  CHECK(c.pos_encoding == dsl::GptConfig::Pos::learned);
  CHECK(c.tie_weights);
  CHECK(c.gelu == dsl::GeluKind::erf);
  CHECK(c.layernorm_eps == 1e-5f);

  json j = kValid;
  j["bias"] = false;
  j["pos_encoding"] = "sinusoidal";
  j["tie_weights"] = false;
  j["gelu"] = "tanh";
  j["layernorm_eps"] = 1;  // an integer is a number too
  j["n_layer"] = 0;        // no blocks is a (degenerate) valid model
  const dsl::GptConfig d = train::parse_config(j.dump(), "model.json");
  CHECK_FALSE(d.bias);
  CHECK(d.pos_encoding == dsl::GptConfig::Pos::sinusoidal);
  CHECK_FALSE(d.tie_weights);
  CHECK(d.gelu == dsl::GeluKind::tanh);
  CHECK(d.layernorm_eps == 1.0f);
  CHECK(d.n_layer == 0);

  // The golden configs parse.
  CHECK(train::load_config(std::string(GG_SOURCE_DIR) + "/tests/golden/ref_odd.config.json").n_embd == 15);
  CHECK_THROWS_WITH_AS(train::load_config("/nonexistent/model.json"), doctest::Contains("/nonexistent/model.json"),
                       InputError);
}

TEST_CASE("parse_config refuses bad configs, naming the key") {
  SUBCASE("unknown key") {
    json j = kValid;
    j["dropout"] = 0.1;
    const std::string m = config_error(j.dump());
    CHECK(contains(m, "model.json"));
    CHECK(contains(m, "unknown key 'dropout'"));
  }
  SUBCASE("missing key, each of the ten") {
    for (auto& [key, value] : kValid.items()) {
      json j = kValid;
      j.erase(key);
      const std::string m = config_error(j.dump());
      INFO("removed " << key << ": " << m);
      CHECK(contains(m, "missing key '" + key + "'"));
      CHECK(contains(m, "model.json"));
    }
  }
  SUBCASE("wrong types") {
    struct Bad {
      const char* key;
      json value;
    };
    const Bad bads[] = {
        {"vocab_size", "65"},        {"block_size", 64.5},  {"n_layer", true},           {"n_head", nullptr},
        {"n_embd", json::array()},   {"bias", 1},           {"tie_weights", "true"},     {"gelu", "relu"},
        {"gelu", true},              {"pos_encoding", "rotary"}, {"pos_encoding", 0},    {"layernorm_eps", "1e-5"},
    };
    for (const Bad& b : bads) {
      json j = kValid;
      j[b.key] = b.value;
      const std::string m = config_error(j.dump());
      INFO(b.key << " = " << b.value.dump() << ": " << m);
      CHECK(contains(m, std::string("key '") + b.key + "'"));
    }
  }
  SUBCASE("n_embd not divisible by n_head") {
    json j = kValid;
    j["n_head"] = 3;
    const std::string m = config_error(j.dump());
    CHECK(contains(m, "'n_embd'"));
    CHECK(contains(m, "n_head"));
  }
  SUBCASE("zero and negative sizes") {
    const std::pair<const char*, json> bads[] = {
        {"vocab_size", 0}, {"vocab_size", -1}, {"block_size", 0}, {"block_size", -64}, {"n_layer", -1},
        {"n_head", 0},     {"n_head", -4},     {"n_embd", 0},     {"n_embd", -64},     {"layernorm_eps", 0},
        {"layernorm_eps", -1e-5}};
    for (auto& [key, value] : bads) {
      json j = kValid;
      j[key] = value;
      const std::string m = config_error(j.dump());
      INFO(key << " = " << value.dump() << ": " << m);
      CHECK(contains(m, std::string("key '") + key + "'"));
    }
  }
  SUBCASE("implausibly large sizes name their key") {
    for (const char* key : {"vocab_size", "block_size", "n_layer", "n_embd"}) {
      json j = kValid;
      j[key] = std::int64_t(1) << 40;
      if (std::string(key) == "n_embd") j["n_head"] = 1;
      const std::string m = config_error(j.dump());
      INFO(key << ": " << m);
      CHECK(contains(m, std::string("key '") + key + "'"));
    }
  }
  SUBCASE("invalid JSON and non-object JSON") {
    for (const char* text : {"{", "", "{\"vocab_size\": 65,}", "not json"}) {
      const std::string m = config_error(text);
      INFO(text);
      CHECK(contains(m, "model.json"));
      CHECK(contains(m, "not valid JSON"));
    }
    for (const char* text : {"[1, 2]", "3", "\"config\"", "null"}) {
      const std::string m = config_error(text);
      INFO(text);
      CHECK(contains(m, "model.json"));
      CHECK(contains(m, "JSON object"));
    }
  }
}

TEST_CASE("config_to_json round trip") {
  dsl::GptConfig c;
  c.vocab_size = 29;
  c.block_size = 12;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 12;
  c.bias = false;
  c.pos_encoding = dsl::GptConfig::Pos::sinusoidal;
  c.tie_weights = false;
  c.gelu = dsl::GeluKind::tanh;
  c.layernorm_eps = 1e-6f;
  const std::string text = train::config_to_json(c);
  CHECK(json::parse(text).size() == 10);
  const dsl::GptConfig d = train::parse_config(text, "roundtrip");
  CHECK(d.vocab_size == c.vocab_size);
  CHECK(d.block_size == c.block_size);
  CHECK(d.n_layer == c.n_layer);
  CHECK(d.n_head == c.n_head);
  CHECK(d.n_embd == c.n_embd);
  CHECK(d.bias == c.bias);
  CHECK(d.pos_encoding == c.pos_encoding);
  CHECK(d.tie_weights == c.tie_weights);
  CHECK(d.gelu == c.gelu);
  CHECK(d.layernorm_eps == c.layernorm_eps);
  CHECK(train::config_to_json(d) == text);

  const dsl::GptConfig e = train::parse_config(train::config_to_json(dsl::GptConfig{}), "defaults");
  CHECK(train::config_to_json(e) == train::config_to_json(dsl::GptConfig{}));
  CHECK(e.pos_encoding == dsl::GptConfig::Pos::learned);
  CHECK(e.gelu == dsl::GeluKind::erf);
}

TEST_CASE("validate_config on a config built in code") {
  dsl::GptConfig c;
  CHECK_NOTHROW(train::validate_config(c, "code"));
  c.n_head = 5;  // 128 % 5 != 0
  CHECK_THROWS_WITH_AS(train::validate_config(c, "code"), doctest::Contains("'n_embd'"), InputError);
}

TEST_CASE("TrainOptions::merge_json") {
  train::TrainOptions o;
  o.merge_json(R"({"steps": 10, "lr": 0.5, "optimizer": "sgd", "bias": false, "seed": 7, "min_lr": 0})", "opts.json");
  CHECK(o.steps == 10);
  CHECK(o.lr == 0.5);
  CHECK(o.optimizer == "sgd");
  CHECK_FALSE(o.bias);
  CHECK(o.seed == 7);
  CHECK(o.n_embd == train::TrainOptions{}.n_embd);  // untouched keys keep their values

  // to_json reads back to the same options.
  train::TrainOptions p;
  p.merge_json(o.to_json(), "to_json");
  CHECK(p.to_json() == o.to_json());

  CHECK(contains(options_error(R"({"stepz": 10})"), "unknown option 'stepz'"));
  CHECK(contains(options_error(R"({"stepz": 10})"), "opts.json"));
  CHECK(contains(options_error(R"({"steps": "10"})"), "key 'steps'"));
  CHECK(contains(options_error(R"({"steps": 1.5})"), "key 'steps'"));
  CHECK(contains(options_error(R"({"bias": 1})"), "key 'bias'"));
  CHECK(contains(options_error(R"({"lr": "fast"})"), "key 'lr'"));
  CHECK(contains(options_error(R"({"optimizer": 3})"), "key 'optimizer'"));
  CHECK(contains(options_error("{"), "not valid JSON"));
  CHECK(contains(options_error("[]"), "JSON object"));
}

TEST_CASE("TrainOptions::validate names the bad option") {
  CHECK(validate_error(train::TrainOptions{}) == "");
  struct Bad {
    const char* option;
    void (*set)(train::TrainOptions&);
  };
  const Bad bads[] = {
      {"--steps", [](train::TrainOptions& o) { o.steps = -1; }},
      {"--batch-size", [](train::TrainOptions& o) { o.batch_size = 0; }},
      {"--warmup", [](train::TrainOptions& o) { o.warmup = -1; }},
      {"--lr", [](train::TrainOptions& o) { o.lr = 0; }},
      {"--lr", [](train::TrainOptions& o) { o.lr = INFINITY; }},
      {"--min-lr", [](train::TrainOptions& o) { o.min_lr = 1; }},
      {"--min-lr", [](train::TrainOptions& o) { o.min_lr = -1e-4; }},
      {"--optimizer", [](train::TrainOptions& o) { o.optimizer = "adam"; }},
      {"--betas", [](train::TrainOptions& o) { o.beta1 = 1.0; }},
      {"--betas", [](train::TrainOptions& o) { o.beta2 = -0.1; }},
      {"--eps", [](train::TrainOptions& o) { o.eps = 0; }},
      {"--weight-decay", [](train::TrainOptions& o) { o.weight_decay = -0.1; }},
      {"--momentum", [](train::TrainOptions& o) { o.momentum = 1.0; }},
      {"--clip", [](train::TrainOptions& o) { o.clip = -1; }},
      {"--dropout", [](train::TrainOptions& o) { o.dropout = 1.0; }},
      {"--eval-interval", [](train::TrainOptions& o) { o.eval_interval = 0; }},
      {"--eval-iters", [](train::TrainOptions& o) { o.eval_iters = 0; }},
      {"--final-eval-iters", [](train::TrainOptions& o) { o.final_eval_iters = 0; }},
      {"--pos-encoding", [](train::TrainOptions& o) { o.pos_encoding = "rotary"; }},
      {"--gelu", [](train::TrainOptions& o) { o.gelu = "relu"; }},
      {"n_embd", [](train::TrainOptions& o) { o.n_head = 3; }},
      {"n_layer", [](train::TrainOptions& o) { o.n_layer = -1; }},
      {"block_size", [](train::TrainOptions& o) { o.block_size = 0; }},
      // Caught before training, not after it when the sample is drawn.
      {"--temperature", [](train::TrainOptions& o) { o.temperature = 0; }},
      {"--top-k", [](train::TrainOptions& o) { o.top_k = -1; }},
  };
  for (const Bad& b : bads) {
    train::TrainOptions o;
    b.set(o);
    const std::string m = validate_error(o);
    INFO(b.option << ": " << m);
    CHECK(contains(m, b.option));
  }
  // NaN compares false with everything: it must not slip through a `x < 0` test.
  const Bad nans[] = {
      {"--min-lr", [](train::TrainOptions& o) { o.min_lr = std::numeric_limits<double>::quiet_NaN(); }},
      {"--betas", [](train::TrainOptions& o) { o.beta1 = std::numeric_limits<double>::quiet_NaN(); }},
      {"--betas", [](train::TrainOptions& o) { o.beta2 = std::numeric_limits<double>::quiet_NaN(); }},
      {"--eps", [](train::TrainOptions& o) { o.eps = std::numeric_limits<double>::quiet_NaN(); }},
      {"--weight-decay", [](train::TrainOptions& o) { o.weight_decay = std::numeric_limits<double>::quiet_NaN(); }},
      {"--momentum", [](train::TrainOptions& o) { o.momentum = std::numeric_limits<double>::quiet_NaN(); }},
      {"--clip", [](train::TrainOptions& o) { o.clip = std::numeric_limits<double>::quiet_NaN(); }},
      {"--dropout", [](train::TrainOptions& o) { o.dropout = std::numeric_limits<double>::quiet_NaN(); }},
      {"--temperature", [](train::TrainOptions& o) { o.temperature = std::numeric_limits<double>::quiet_NaN(); }},
  };
  for (const Bad& b : nans) {
    train::TrainOptions o;
    b.set(o);
    const std::string m = validate_error(o);
    INFO(b.option << " = nan: " << m);
    CHECK(contains(m, b.option));
  }
}
