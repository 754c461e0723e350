// Tests for train/options: one table describes each option once; JSON reading (unknown,
// duplicate, missing, mistyped and out-of-range keys), command-line text, and writing back.
#include "train/options.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/test_util.h"

namespace {

using namespace gg;
using gg::test::contains;
using train::InputError;

enum class Act { relu, gelu };

struct MlpOptions {
  std::int64_t hidden = 64;
  double dropout = 0.0;
  float eps = 1e-5f;
  bool bias = true;
  Act act = Act::gelu;
  std::string name = "mlp";
  static const train::OptionTable<MlpOptions>& table() {
    using train::opt;
    static const train::OptionTable<MlpOptions> t{
        {opt("hidden", &MlpOptions::hidden, "Hidden width").at_least(1).at_most(4096),
         opt("dropout", &MlpOptions::dropout, "Dropout rate").at_least(0).below(1),
         opt("eps", &MlpOptions::eps, "Epsilon").above(0),
         opt("bias", &MlpOptions::bias, "Biases"),
         train::choice("act", &MlpOptions::act, {{"relu", Act::relu}, {"gelu", Act::gelu}}, "Activation"),
         opt("name", &MlpOptions::name, "A name").optional()},
        [](const MlpOptions& o) -> std::pair<std::string, std::string> {
          if (o.hidden % 2 && o.act == Act::gelu) return {"hidden", "must be even with gelu"};
          return {};
        }};
    return t;
  }
};

std::string json_error(const std::string& text, bool require_all = false) {
  try {
    MlpOptions o;
    train::read_json(text, "mlp.json", {train::bind(o)}, require_all);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("options: JSON in and out, every value checked") {
  MlpOptions o;
  train::read_json(R"({"hidden": 8, "dropout": 0.5, "act": "relu", "bias": false, "eps": 1})", "mlp.json",
                   {train::bind(o)});
  CHECK(o.hidden == 8);
  CHECK(o.dropout == 0.5);
  CHECK(o.act == Act::relu);
  CHECK_FALSE(o.bias);
  CHECK(o.eps == 1.f);
  CHECK(o.name == "mlp");  // untouched
  // Written back and read again: the same options; floats keep their short form.
  const std::string text = MlpOptions::table().to_json(&o);
  const MlpOptions defaults;
  CHECK(contains(MlpOptions::table().to_json(&defaults), "\"eps\":1e-05"));
  MlpOptions p;
  train::read_json(text, "again", {train::bind(p)}, /*require_all=*/true);
  CHECK(MlpOptions::table().to_json(&p) == text);

  CHECK(contains(json_error(R"({"hiden": 8})"), "mlp.json: unknown key 'hiden' (did you mean 'hidden'?)"));
  CHECK(contains(json_error(R"({"hidden": 8, "hidden": 9})"), "duplicate key 'hidden'"));
  CHECK(contains(json_error(R"({"hidden": 0})"), "key 'hidden': must be an integer in [1, 4096], got 0"));
  CHECK(contains(json_error(R"({"hidden": 2.5})"), "key 'hidden': must be an integer"));
  CHECK(contains(json_error(R"({"hidden": 18446744073709551615})"), "key 'hidden'"));
  CHECK(contains(json_error(R"({"dropout": 1})"), "key 'dropout': must be a number in [0, 1), got 1"));
  CHECK(contains(json_error(R"({"eps": 1e300})"), "key 'eps'"));  // infinite as float32
  CHECK(contains(json_error(R"({"bias": "yes"})"), "key 'bias': must be true or false"));
  CHECK(contains(json_error(R"({"act": "tanh"})"), "key 'act': must be one of relu, gelu, got 'tanh'"));
  CHECK(contains(json_error(R"({"act": ["relu"]})"), "key 'act': must be one of relu, gelu, got [\"relu\"]"));
  CHECK(contains(json_error(R"({"hidden": 7})"), "key 'hidden': must be even with gelu"));
  CHECK(contains(json_error(R"({"hidden": 8})", /*require_all=*/true), "missing key 'dropout'"));
  CHECK(json_error(R"({"hidden": 8, "dropout": 0, "eps": 1, "bias": true, "act": "gelu"})", true) == "");
  CHECK(contains(json_error("{"), "not valid JSON"));
  CHECK(contains(json_error("[1]"), "must be a JSON object"));
  // Long values are cut, not echoed whole.
  const std::string long_value = json_error(R"({"act": ")" + std::string(100000, 'x') + "\"}");
  CHECK(contains(long_value, "..."));
  CHECK(long_value.size() < 300);
  CHECK(json_error("{\"" + std::string(100000, 'k') + "\": 1}").size() < 300);
}

TEST_CASE("options: command-line text") {
  MlpOptions o;
  std::vector<train::BoundOptions> sets{train::bind(o)};
  train::set_from_text(sets, "hidden", "16");
  train::set_from_text(sets, "bias", "false");
  train::set_from_text(sets, "act", "relu");
  train::set_from_text(sets, "dropout", "0.25");
  CHECK(o.hidden == 16);
  CHECK_FALSE(o.bias);
  CHECK(o.act == Act::relu);
  CHECK(o.dropout == 0.25);
  auto err = [&](const char* name, const char* text) {
    try {
      train::set_from_text(sets, name, text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err("hidden", "2abc") == "--hidden: must be an integer in [1, 4096], got '2abc'");
  CHECK(contains(err("hidden", "99999999999999999999"), "--hidden"));
  CHECK(contains(err("hidden", "-5"), "--hidden: must be an integer in [1, 4096], got -5"));
  CHECK(contains(err("dropout", "inf"), "--dropout"));
  CHECK(contains(err("dropout", "nan"), "--dropout"));
  CHECK(contains(err("bias", "maybe"), "--bias: must be true or false"));
  CHECK(contains(err("widht", "3"), "unknown option --widht"));
  CHECK(train::flag_name("n_layer") == "--n-layer");
  CHECK(train::closest("n_heads", {"n_head", "n_embd", "n_layer"}) == "n_head");
  CHECK(train::closest("zzzzzz", {"n_head", "n_embd"}) == "");
}
