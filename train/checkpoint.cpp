// Checkpoint files: tensors "<param>", "optim.<key>", "curve.<series>"; metadata "format",
// "model", "model_options", "optimizer", "step", "train_options", "rng", "user.<key>".
#include "train/checkpoint.h"

#include <fmt/format.h>

#include <charconv>

#include "io/message.h"
#include "io/safetensors.h"

namespace gg::train {

static constexpr const char* kFormat = "gradgraph-checkpoint-2";

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  io::File f;
  f.metadata["format"] = kFormat;
  f.metadata["model"] = ck.model_kind;
  f.metadata["model_options"] = ck.model_options;
  f.metadata["optimizer"] = ck.optimizer;
  f.metadata["step"] = std::to_string(ck.step);
  f.metadata["train_options"] = ck.train_options;
  f.metadata["rng"] = ck.rng_state;
  for (auto& [k, v] : ck.user) f.metadata["user." + k] = v;
  for (auto& [name, t] : ck.params) {
    if (name.starts_with("optim.") || name.starts_with("curve."))
      throw InputError(fmt::format("{}: parameter name {} uses a prefix reserved for checkpoints", io::cut(path, 80),
                                   io::in_quotes(name, 60)));
    f.add_f32(name, t.shape(), t.to_vector());
  }
  for (auto& [k, t] : ck.optim_state) f.add_f32("optim." + k, t.shape(), t.to_vector());
  for (const Series& s : ck.curves) {
    std::vector<float> xy;
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      xy.push_back(float(s.x[i]));
      xy.push_back(float(s.y[i]));
    }
    f.add_f32("curve." + s.name, {std::int64_t(s.x.size()), 2}, xy);
  }
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
  const std::string at = io::cut(path, 80);  // the path as messages show it
  auto meta = [&](const char* k) {
    auto it = f.metadata.find(k);
    if (it == f.metadata.end()) throw InputError(fmt::format("{}: not a gradgraph checkpoint (no '{}' metadata)", at, k));
    return it->second;
  };
  const std::string format = meta("format");
  if (format != kFormat)
    throw InputError(fmt::format("{}: checkpoint format '{}' is not '{}'", at, io::cut(format, 60), kFormat));
  Checkpoint ck;
  ck.model_kind = meta("model");
  ck.model_options = meta("model_options");
  ck.optimizer = meta("optimizer");
  if (ck.optimizer != "adamw" && ck.optimizer != "sgd")
    throw InputError(fmt::format("{}: optimizer '{}' is neither adamw nor sgd", at, io::cut(ck.optimizer, 60)));
  const std::string step = meta("step");
  auto [end, ec] = std::from_chars(step.data(), step.data() + step.size(), ck.step);
  if (ec != std::errc{} || end != step.data() + step.size() || step.empty() || ck.step < 0)
    throw InputError(fmt::format("{}: step '{}' is not a whole number >= 0", at, io::cut(step, 40)));
  ck.train_options = meta("train_options");
  ck.rng_state = meta("rng");
  for (auto& [k, v] : f.metadata)
    if (k.starts_with("user.")) ck.user[k.substr(5)] = v;
  for (auto& [name, e] : f.tensors) {
    if (e.dtype != io::DType::f32)
      throw InputError(fmt::format("{}: tensor '{}' is {}, checkpoints hold F32 only", at, io::cut(name, 60),
                                   io::dtype_name(e.dtype)));
    Tensor t = Tensor::f32(e.shape, e.to_f32());
    if (name.starts_with("optim.")) {
      ck.optim_state.emplace(name.substr(6), std::move(t));
    } else if (name.starts_with("curve.")) {
      if (t.shape().size() != 2 || t.shape()[1] != 2)
        throw InputError(fmt::format("{}: curve {} has shape {}, expected (n, 2)", at, io::in_quotes(name, 60),
                                     io::cut(to_string(t.shape()), 40)));
      Series s{name.substr(6), {}, {}};
      for (std::int64_t i = 0; i < t.shape()[0]; ++i) {
        s.x.push_back(t.f()[2 * i]);
        s.y.push_back(t.f()[2 * i + 1]);
      }
      ck.curves.push_back(std::move(s));
    } else {
      ck.params.emplace(name, std::move(t));
    }
  }
  return ck;
}

std::map<std::string, Tensor> tensors_of(const io::File& f) {
  std::map<std::string, Tensor> r;
  try {
    for (auto& [name, e] : f.tensors)
      r.emplace(name, e.dtype == io::DType::f32 ? Tensor::f32(e.shape, e.to_f32()) : Tensor::i32(e.shape, e.to_i32()));
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
  return r;
}

std::map<std::string, Tensor> read_tensors(const std::string& path) {
  try {
    return tensors_of(io::read_safetensors(path));
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
}

}  // namespace gg::train
