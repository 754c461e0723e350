// Fuzz target: the checkpoint loader as `gradgraph train --resume` and `gradgraph sample`
// use it. The input is the file's bytes (written to a temp file: load_checkpoint takes a
// path). If train::load_checkpoint accepts it, the char-LM view (models::load_char_lm:
// GPT options and vocabulary) is loaded, and if that too is accepted, the model it names is
// declared (train::Model::declare on a (1, block_size) batch), its parameters loaded from
// the checkpoint, its train_options read, and the optimizer state loaded against them (Optimizer::load_state with
// param_shapes), as Run::resume does. Refusals (InputError, io::Error, GraphError) are
// expected; a crash, a sanitizer report or a leak is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "io/error.h"
#include "models/char_lm.h"
#include "models/gpt.h"
#include "ops/ir/graph.h"
#include "train/checkpoint.h"
#include "train/error.h"
#include "train/model.h"
#include "train/optim.h"
#include "train/options.h"
#include "train/trainer.h"

namespace {

// One temp file per process, rewritten for every input.
const std::string& temp_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/gg_fuzz_checkpoint_" + std::to_string(getpid()) + ".safetensors";
  }();
  static const bool cleanup = std::atexit([] { std::remove(path.c_str()); }) == 0;  // removed at exit
  (void)cleanup;
  return path;
}

bool write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

void check(const std::string& path) {
  using namespace gg;
  train::Checkpoint ck = train::load_checkpoint(path);
  models::CharLmCheckpoint c = models::load_char_lm(path);
  // The model the checkpoint names, declared as a run would declare it.
  train::Model m = models::gpt_model(c.config);
  train::Batch b;
  const std::int64_t T = c.config.block_size;
  b.emplace("tokens", Tensor::i32({1, T}, std::vector<std::int32_t>(std::size_t(T), 0)));
  b.emplace("targets", Tensor::i32({1, T}, std::vector<std::int32_t>(std::size_t(T), 0)));
  const std::vector<train::ParamInfo>& table = m.declare(b);
  train::load_params(m.params(), ck.params, table, path);
  // The optimizer with the checkpoint's own options (its train_options, as resume reads them).
  train::TrainOptions saved;
  train::read_json(ck.train_options, path + " (train_options)", {train::bind(saved)});
  std::unique_ptr<Optimizer> opt;
  if (ck.optimizer == "adamw")
    opt = std::make_unique<AdamW>(AdamWOptions{saved.beta1, saved.beta2, saved.eps, saved.weight_decay});
  else
    opt = std::make_unique<Sgd>(saved.momentum);
  opt->load_state(ck.optim_state, ck.step, param_shapes(m.params()));
  if (opt->steps() != ck.step) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = temp_path();
  if (!write_file(path, data, size)) __builtin_trap();
  try {
    check(path);
  } catch (const gg::train::InputError&) {
  } catch (const gg::io::Error&) {
  } catch (const gg::GraphError&) {
  }
  return 0;
}
