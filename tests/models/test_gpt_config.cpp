// Tests for the GPT's option table (the model config JSON of docs/reference-model.md) and
// the validation of train::TrainOptions through its table: every refusal is an InputError
// naming the key.
#include "models/gpt.h"

#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "train/trainer.h"
#include "models/char_lm.h"

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
    models::parse_gpt_config(text, "model.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

using gg::test::contains;

std::string options_error(const std::string& text) {
  try {
    train::TrainOptions o;
    train::read_json(text, "opts.json", {train::bind(o)});
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string validate_error(const train::TrainOptions& o) {
  try {
    train::TrainOptions::table().validate(&o, "options");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parse_config: a valid config") {
  const models::GptConfig c = models::parse_gpt_config(kValid.dump(), "model.json");
  CHECK(c.vocab_size == 65);
  CHECK(c.block_size == 64);
  CHECK(c.n_layer == 2);
  CHECK(c.n_head == 4);
  CHECK(c.n_embd == 64);
  CHECK(c.bias);
  CHECK(c.pos_encoding == models::GptConfig::Pos::learned);
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
  const models::GptConfig d = models::parse_gpt_config(j.dump(), "model.json");
  CHECK_FALSE(d.bias);
  CHECK(d.pos_encoding == models::GptConfig::Pos::sinusoidal);
  CHECK_FALSE(d.tie_weights);
  CHECK(d.gelu == dsl::GeluKind::tanh);
  CHECK(d.layernorm_eps == 1.0f);
  CHECK(d.n_layer == 0);

  // The golden configs parse.
  CHECK(models::load_gpt_config(std::string(GG_SOURCE_DIR) + "/tests/golden/ref_odd.config.json").n_embd == 15);
  CHECK_THROWS_WITH_AS(models::load_gpt_config("/nonexistent/model.json"), doctest::Contains("/nonexistent/model.json"),
                       InputError);
}

TEST_CASE("parse_config refuses bad configs, naming the key") {
  SUBCASE("unknown key, with the closest known one") {
    json j = kValid;
    j["n_heads"] = 4;
    const std::string m = config_error(j.dump());
    CHECK(contains(m, "model.json"));
    CHECK(contains(m, "unknown key 'n_heads' (did you mean 'n_head'?)"));
  }
  SUBCASE("the two keys beyond the spec are optional and checked") {
    json j = kValid;
    j["dropout"] = 0.1;
    j["attn_scale"] = false;
    const models::GptConfig c = models::parse_gpt_config(j.dump(), "model.json");
    CHECK(c.dropout == 0.1f);
    CHECK_FALSE(c.attn_scale);
    j["dropout"] = 1.0;
    CHECK(contains(config_error(j.dump()), "key 'dropout'"));
  }
  SUBCASE("duplicate keys, deep nesting, values beyond float") {
    std::string dup = kValid.dump();
    dup.insert(1, "\"n_head\": 2, ");
    CHECK(contains(config_error(dup), "duplicate key 'n_head'"));
    CHECK(contains(config_error(std::string(100000, '[') + std::string(100000, ']')), "nests deeper than 32 levels"));
    json j = kValid;
    j["layernorm_eps"] = 1e300;  // infinite as float32
    CHECK(contains(config_error(j.dump()), "key 'layernorm_eps'"));
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
  models::GptConfig c;
  c.vocab_size = 29;
  c.block_size = 12;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 12;
  c.bias = false;
  c.pos_encoding = models::GptConfig::Pos::sinusoidal;
  c.tie_weights = false;
  c.gelu = dsl::GeluKind::tanh;
  c.layernorm_eps = 1e-6f;
  const std::string text = models::to_json(c);
  CHECK(json::parse(text).size() == 12);  // the spec's ten and the two optional ones
  const models::GptConfig d = models::parse_gpt_config(text, "roundtrip");
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
  CHECK(models::to_json(d) == text);

  const models::GptConfig e = models::parse_gpt_config(models::to_json(models::GptConfig{}), "defaults");
  CHECK(models::to_json(e) == models::to_json(models::GptConfig{}));
  CHECK(e.pos_encoding == models::GptConfig::Pos::learned);
  CHECK(e.gelu == dsl::GeluKind::erf);
}

TEST_CASE("a config built in code is validated by the same table") {
  models::GptConfig c;
  CHECK_NOTHROW(models::GptConfig::table().validate(&c, "code"));
  c.n_head = 5;  // 128 % 5 != 0
  CHECK_THROWS_WITH_AS(models::GptConfig::table().validate(&c, "code"), doctest::Contains("'n_embd'"), InputError);
  CHECK_THROWS_WITH_AS(models::gpt_model(c), doctest::Contains("'n_embd'"), InputError);
}

TEST_CASE("TrainOptions and GptConfig read from one JSON object") {
  train::TrainOptions o;
  models::GptConfig c;
  train::read_json(R"({"steps": 10, "lr": 0.5, "optimizer": "sgd", "bias": false, "seed": 7, "min_lr": 0})", "opts.json",
                   {train::bind(o), train::bind(c)});
  CHECK(o.steps == 10);
  CHECK(o.lr == 0.5);
  CHECK(o.optimizer == "sgd");
  CHECK_FALSE(c.bias);
  CHECK(o.seed == 7);
  CHECK(c.n_embd == models::GptConfig{}.n_embd);  // untouched keys keep their values

  // to_json reads back to the same options.
  train::TrainOptions p;
  const std::string text = train::TrainOptions::table().to_json(&o);
  train::read_json(text, "to_json", {train::bind(p)});
  CHECK(train::TrainOptions::table().to_json(&p) == text);

  CHECK(contains(options_error(R"({"stepz": 10})"), "unknown key 'stepz' (did you mean 'steps'?)"));
  CHECK(contains(options_error(R"({"stepz": 10})"), "opts.json"));
  CHECK(contains(options_error(R"({"steps": "10"})"), "key 'steps'"));
  CHECK(contains(options_error(R"({"steps": 1.5})"), "key 'steps'"));
  CHECK(contains(options_error(R"({"resume": 1})"), "key 'resume'"));
  CHECK(contains(options_error(R"({"steps": 99999999999999999999})"), "key 'steps'"));
  CHECK(contains(options_error(R"({"seed": -1})"), "key 'seed'"));
  CHECK(contains(options_error(R"({"weight_decay": 1e400})"), "not valid JSON"));
  CHECK(contains(options_error(R"({"steps": 1, "steps": 2})"), "duplicate key 'steps'"));
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
      {"steps", [](train::TrainOptions& o) { o.steps = -1; }},
      {"warmup", [](train::TrainOptions& o) { o.warmup = -1; }},
      {"lr", [](train::TrainOptions& o) { o.lr = 0; }},
      {"lr", [](train::TrainOptions& o) { o.lr = INFINITY; }},
      {"min_lr", [](train::TrainOptions& o) { o.min_lr = 1; }},
      {"min_lr", [](train::TrainOptions& o) { o.min_lr = -1e-4; }},
      {"optimizer", [](train::TrainOptions& o) { o.optimizer = "adam"; }},
      {"beta1", [](train::TrainOptions& o) { o.beta1 = 1.0; }},
      {"beta2", [](train::TrainOptions& o) { o.beta2 = -0.1; }},
      {"eps", [](train::TrainOptions& o) { o.eps = 0; }},
      {"weight_decay", [](train::TrainOptions& o) { o.weight_decay = -0.1; }},
      {"momentum", [](train::TrainOptions& o) { o.momentum = 1.0; }},
      {"clip", [](train::TrainOptions& o) { o.clip = -1; }},
      {"eval_interval", [](train::TrainOptions& o) { o.eval_interval = 0; }},
      {"eval_iters", [](train::TrainOptions& o) { o.eval_iters = 0; }},
      {"final_eval_iters", [](train::TrainOptions& o) { o.final_eval_iters = 0; }},
      {"steps", [](train::TrainOptions& o) { o.steps = 0; }},
      {"lr", [](train::TrainOptions& o) { o.lr = 1e4; }},
      {"weight_decay", [](train::TrainOptions& o) { o.weight_decay = INFINITY; }},
  };
  for (const Bad& b : bads) {
    train::TrainOptions o;
    b.set(o);
    const std::string m = validate_error(o);
    INFO(b.option << ": " << m);
    CHECK(contains(m, std::string("key '") + b.option + "'"));
  }
  // NaN compares false with everything: it must not slip through a `x < 0` test.
  const Bad nans[] = {
      {"min_lr", [](train::TrainOptions& o) { o.min_lr = std::numeric_limits<double>::quiet_NaN(); }},
      {"beta1", [](train::TrainOptions& o) { o.beta1 = std::numeric_limits<double>::quiet_NaN(); }},
      {"beta2", [](train::TrainOptions& o) { o.beta2 = std::numeric_limits<double>::quiet_NaN(); }},
      {"eps", [](train::TrainOptions& o) { o.eps = std::numeric_limits<double>::quiet_NaN(); }},
      {"weight_decay", [](train::TrainOptions& o) { o.weight_decay = std::numeric_limits<double>::quiet_NaN(); }},
      {"momentum", [](train::TrainOptions& o) { o.momentum = std::numeric_limits<double>::quiet_NaN(); }},
      {"clip", [](train::TrainOptions& o) { o.clip = std::numeric_limits<double>::quiet_NaN(); }},
      {"lr", [](train::TrainOptions& o) { o.lr = std::numeric_limits<double>::quiet_NaN(); }},
  };
  for (const Bad& b : nans) {
    train::TrainOptions o;
    b.set(o);
    const std::string m = validate_error(o);
    INFO(b.option << " = nan: " << m);
    CHECK(contains(m, std::string("key '") + b.option + "'"));
  }
}
