// Config parsing: exact keys, exact types, sane values.
#include "train/config.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace gg::train {

using nlohmann::json;

void validate_config(const dsl::GptConfig& c, const std::string& source) {
  auto bad = [&](const char* key, const std::string& why) {
    throw InputError(fmt::format("{}: key '{}': {}", source, key, why));
  };
  if (c.vocab_size < 1) bad("vocab_size", fmt::format("must be >= 1, got {}", c.vocab_size));
  if (c.block_size < 1) bad("block_size", fmt::format("must be >= 1, got {}", c.block_size));
  if (c.n_layer < 0) bad("n_layer", fmt::format("must be >= 0, got {}", c.n_layer));
  if (c.n_head < 1) bad("n_head", fmt::format("must be >= 1, got {}", c.n_head));
  if (c.n_embd < 1) bad("n_embd", fmt::format("must be >= 1, got {}", c.n_embd));
  if (c.n_embd % c.n_head != 0)
    bad("n_embd", fmt::format("{} is not divisible by n_head = {}", c.n_embd, c.n_head));
  if (!(c.layernorm_eps > 0)) bad("layernorm_eps", fmt::format("must be > 0, got {}", c.layernorm_eps));
  if (c.vocab_size > (1 << 24)) bad("vocab_size", fmt::format("{} is implausibly large (max {})", c.vocab_size, 1 << 24));
  if (c.block_size > (1 << 20)) bad("block_size", fmt::format("{} is implausibly large (max {})", c.block_size, 1 << 20));
  if (c.n_embd > (1 << 16)) bad("n_embd", fmt::format("{} is implausibly large (max {})", c.n_embd, 1 << 16));
  if (c.n_layer > 1024) bad("n_layer", fmt::format("{} is implausibly large (max {})", c.n_layer, 1024));
}

dsl::GptConfig parse_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("{}: must be a JSON object", source));
  static const std::set<std::string> keys = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd",
                                             "bias", "pos_encoding", "tie_weights", "gelu", "layernorm_eps"};
  for (auto& [k, v] : j.items())
    if (!keys.count(k)) throw InputError(fmt::format("{}: unknown key '{}'", source, k));
  for (const auto& k : keys)
    if (!j.contains(k)) throw InputError(fmt::format("{}: missing key '{}'", source, k));
  auto integer = [&](const char* k) {
    const json& v = j.at(k);
    if (!v.is_number_integer()) throw InputError(fmt::format("{}: key '{}': must be an integer, got {}", source, k, v.dump()));
    return v.get<std::int64_t>();
  };
  auto boolean = [&](const char* k) {
    const json& v = j.at(k);
    if (!v.is_boolean()) throw InputError(fmt::format("{}: key '{}': must be true or false, got {}", source, k, v.dump()));
    return v.get<bool>();
  };
  auto choice = [&](const char* k, const char* a, const char* b) {
    const json& v = j.at(k);
    if (!v.is_string() || (v.get<std::string>() != a && v.get<std::string>() != b))
      throw InputError(fmt::format("{}: key '{}': must be \"{}\" or \"{}\", got {}", source, k, a, b, v.dump()));
    return v.get<std::string>() == a;
  };
  dsl::GptConfig c;
  c.vocab_size = integer("vocab_size");
  c.block_size = integer("block_size");
  c.n_layer = integer("n_layer");
  c.n_head = integer("n_head");
  c.n_embd = integer("n_embd");
  c.bias = boolean("bias");
  c.pos_encoding = choice("pos_encoding", "learned", "sinusoidal") ? dsl::GptConfig::Pos::learned
                                                                   : dsl::GptConfig::Pos::sinusoidal;
  c.tie_weights = boolean("tie_weights");
  c.gelu = choice("gelu", "erf", "tanh") ? dsl::GeluKind::erf : dsl::GeluKind::tanh;
  const json& eps = j.at("layernorm_eps");
  if (!eps.is_number()) throw InputError(fmt::format("{}: key 'layernorm_eps': must be a number, got {}", source, eps.dump()));
  c.layernorm_eps = eps.get<float>();
  validate_config(c, source);
  return c;
}

dsl::GptConfig load_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError(fmt::format("{}: cannot open config file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path);
}

std::string config_to_json(const dsl::GptConfig& c) {
  json j = {{"vocab_size", c.vocab_size},
            {"block_size", c.block_size},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_embd", c.n_embd},
            {"bias", c.bias},
            {"pos_encoding", c.pos_encoding == dsl::GptConfig::Pos::learned ? "learned" : "sinusoidal"},
            {"tie_weights", c.tie_weights},
            {"gelu", c.gelu == dsl::GeluKind::erf ? "erf" : "tanh"},
            {"layernorm_eps", c.layernorm_eps}};
  return j.dump();
}

}  // namespace gg::train
