// Checkpoint files: tensors "<param>", "optim.<state key>", "vocab" (I32 bytes); metadata
// "format", "config", "optimizer", "step", "rng", "options".
#include "train/checkpoint.h"

#include <fmt/format.h>

#include "io/safetensors.h"
#include "train/config.h"
#include "train/model.h"

namespace gg::train {

static constexpr const char* kFormat = "gradgraph-checkpoint-1";

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  io::File f;
  f.metadata["format"] = kFormat;
  f.metadata["config"] = config_to_json(ck.config);
  // Beyond the spec's ten keys, but part of the model: without them a model trained with
  // --attn-scale false would be sampled with the scale.
  f.metadata["attn_scale"] = ck.config.attn_scale ? "true" : "false";
  f.metadata["dropout"] = fmt::format("{}", ck.config.dropout);
  f.metadata["optimizer"] = ck.optimizer;
  f.metadata["step"] = std::to_string(ck.step);
  f.metadata["rng"] = ck.rng_state;
  f.metadata["options"] = ck.options_json;
  add_weights(f, ck.params, ck.config);
  for (auto& [k, t] : ck.optim_state) f.add_f32("optim." + k, t.shape(), t.to_vector());
  std::vector<std::int32_t> v;
  for (unsigned char ch : ck.vocab) v.push_back(ch);
  f.add_i32("vocab", {std::int64_t(v.size())}, v);
  try {
    io::write_safetensors(path, f);
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  io::File f;
  try {
    f = io::read_safetensors(path);
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
  auto meta = [&](const char* k) {
    auto it = f.metadata.find(k);
    if (it == f.metadata.end()) throw InputError(fmt::format("{}: not a gradgraph checkpoint (no '{}' metadata)", path, k));
    return it->second;
  };
  if (meta("format") != kFormat)
    throw InputError(fmt::format("{}: checkpoint format '{}' is not '{}'", path, meta("format"), kFormat));
  Checkpoint ck;
  ck.config = parse_config(meta("config"), path + " (config)");
  if (auto it = f.metadata.find("attn_scale"); it != f.metadata.end()) {
    if (it->second != "true" && it->second != "false")
      throw InputError(fmt::format("{}: bad attn_scale '{}'", path, it->second));
    ck.config.attn_scale = it->second == "true";
  }
  if (auto it = f.metadata.find("dropout"); it != f.metadata.end()) {
    try {
      ck.config.dropout = std::stof(it->second);
    } catch (const std::exception&) {
      throw InputError(fmt::format("{}: bad dropout '{}'", path, it->second));
    }
    if (!(ck.config.dropout >= 0 && ck.config.dropout < 1))
      throw InputError(fmt::format("{}: bad dropout '{}'", path, it->second));
  }
  ck.optimizer = meta("optimizer");
  try {
    ck.step = std::stoll(meta("step"));
  } catch (const std::exception&) {
    throw InputError(fmt::format("{}: bad step '{}'", path, meta("step")));
  }
  ck.rng_state = meta("rng");
  ck.options_json = meta("options");
  load_weights(ck.params, f, ck.config, /*allow_extra=*/true);
  for (auto& [name, e] : f.tensors) {
    if (name.rfind("optim.", 0) != 0) continue;
    ck.optim_state.emplace(name.substr(6), Tensor::f32(e.shape, e.to_f32()));
  }
  const io::Entry* v = f.find("vocab");
  if (!v) throw InputError(fmt::format("{}: checkpoint has no 'vocab'", path));
  for (std::int32_t ch : v->to_i32()) {
    if (ch < 0 || ch > 255) throw InputError(fmt::format("{}: vocab holds {}, not a byte", path, ch));
    ck.vocab.push_back(char(ch));
  }
  if (std::int64_t(ck.vocab.size()) != ck.config.vocab_size)
    throw InputError(fmt::format("{}: vocab has {} entries but vocab_size is {}", path, ck.vocab.size(), ck.config.vocab_size));
  return ck;
}

}  // namespace gg::train
