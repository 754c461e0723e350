// run_training(): data, model, optimizer, the step loop, evaluation and the reports.
#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "autodiff/optim.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/data.h"
#include "train/model.h"
#include "train/plot.h"
#include "train/progress.h"

#ifndef GG_SOURCE_DIR
#define GG_SOURCE_DIR "."
#endif

namespace gg::train {

using nlohmann::json;

// Every option, once: its JSON key and a member pointer. Used by merge_json and to_json.
#define GG_TRAIN_OPTIONS(X)                                                                                  \
  X(data) X(out_dir) X(n_layer) X(n_head) X(n_embd) X(block_size) X(bias) X(tie_weights) X(attn_scale)      \
  X(pos_encoding) X(gelu) X(dropout) X(batch_size) X(steps) X(warmup) X(optimizer) X(lr) X(min_lr) X(beta1)  \
  X(beta2) X(eps) X(weight_decay) X(momentum) X(clip) X(eval_interval) X(eval_iters) X(final_eval_iters)      \
  X(sample_tokens) X(temperature) X(top_k) X(seed)

namespace {
template <class T>
void read_key(const json& j, const std::string& key, T& into, const std::string& source) {
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!j.is_boolean()) throw std::runtime_error("must be true or false");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!j.is_string()) throw std::runtime_error("must be a string");
    } else if constexpr (std::is_integral_v<T>) {
      if (!j.is_number_integer()) throw std::runtime_error("must be an integer");
    } else {
      if (!j.is_number()) throw std::runtime_error("must be a number");
    }
    into = j.get<T>();
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: key '{}': {}, got {}", source, key, e.what(), j.dump()));
  }
}
}  // namespace

void TrainOptions::merge_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("{}: must be a JSON object of options", source));
  for (auto& [key, value] : j.items()) {
    bool found = false;
#define GG_READ(name)                                  \
  if (key == #name) {                                  \
    read_key(value, key, this->name, source);          \
    found = true;                                      \
  }
    GG_TRAIN_OPTIONS(GG_READ)
#undef GG_READ
    if (!found) throw InputError(fmt::format("{}: unknown option '{}'", source, key));
  }
}

std::string TrainOptions::to_json() const {
  json j;
#define GG_WRITE(name) j[#name] = this->name;
  GG_TRAIN_OPTIONS(GG_WRITE)
#undef GG_WRITE
  return j.dump();
}

void TrainOptions::validate() const {
  auto bad = [](const std::string& what) { throw InputError(what); };
  if (steps < 0) bad(fmt::format("--steps must be >= 0, got {}", steps));
  if (batch_size < 1) bad(fmt::format("--batch-size must be >= 1, got {}", batch_size));
  if (warmup < 0) bad(fmt::format("--warmup must be >= 0, got {}", warmup));
  if (!(lr > 0) || !std::isfinite(lr)) bad(fmt::format("--lr must be > 0, got {}", lr));
  if (!(min_lr >= 0 && min_lr <= lr)) bad(fmt::format("--min-lr must be in [0, lr], got {}", min_lr));
  if (optimizer != "adamw" && optimizer != "sgd") bad(fmt::format("--optimizer must be adamw or sgd, got '{}'", optimizer));
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)) bad(fmt::format("--betas must be in [0, 1), got {},{}", beta1, beta2));
  if (!(eps > 0)) bad(fmt::format("--eps must be > 0, got {}", eps));
  if (!(weight_decay >= 0)) bad(fmt::format("--weight-decay must be >= 0, got {}", weight_decay));
  if (!(momentum >= 0 && momentum < 1)) bad(fmt::format("--momentum must be in [0, 1), got {}", momentum));
  if (!(clip >= 0)) bad(fmt::format("--clip must be >= 0 (0 = off), got {}", clip));
  if (!(dropout >= 0 && dropout < 1)) bad(fmt::format("--dropout must be in [0, 1), got {}", dropout));
  if (eval_interval < 1) bad(fmt::format("--eval-interval must be >= 1, got {}", eval_interval));
  if (eval_iters < 1 || final_eval_iters < 1) bad("--eval-iters and --final-eval-iters must be >= 1");
  if (pos_encoding != "learned" && pos_encoding != "sinusoidal")
    bad(fmt::format("--pos-encoding must be learned or sinusoidal, got '{}'", pos_encoding));
  if (gelu != "erf" && gelu != "tanh") bad(fmt::format("--gelu must be erf or tanh, got '{}'", gelu));
  if (!(temperature > 0)) bad(fmt::format("--temperature must be > 0, got {}", temperature));
  if (top_k < 0) bad(fmt::format("--top-k must be >= 0, got {}", top_k));
  validate_config(model_config(1), "options");
}

dsl::GptConfig TrainOptions::model_config(std::int64_t vocab_size) const {
  dsl::GptConfig c;
  c.vocab_size = vocab_size;
  c.block_size = block_size;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.bias = bias;
  c.pos_encoding = pos_encoding == "sinusoidal" ? dsl::GptConfig::Pos::sinusoidal : dsl::GptConfig::Pos::learned;
  c.tie_weights = tie_weights;
  c.gelu = gelu == "tanh" ? dsl::GeluKind::tanh : dsl::GeluKind::erf;
  c.dropout = float(dropout);
  c.attn_scale = attn_scale;
  return c;
}

std::string default_data_path() {
  if (std::filesystem::exists("data/tinyshakespeare.txt")) return "data/tinyshakespeare.txt";
  return std::string(GG_SOURCE_DIR) + "/data/tinyshakespeare.txt";
}

namespace {
// Mean loss over `iters` batches drawn from `split` with a fixed seed (same batches each time).
double evaluate(StepRunner& r, const std::vector<std::int32_t>& split, std::int64_t B, std::int64_t T,
                std::int64_t iters, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> x, y;
  double total = 0;
  for (std::int64_t i = 0; i < iters; ++i) {
    sample_batch(split, B, T, rng, x, y);
    total += r.loss(x.data(), y.data());
  }
  return total / double(iters);
}

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o) {
  if (o.optimizer == "sgd") return std::make_unique<Sgd>(o.momentum);
  return std::make_unique<AdamW>(AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
}
}  // namespace

TrainResult run_training(const TrainOptions& opts, std::FILE* out) {
  TrainOptions o = opts;
  o.validate();
  const std::string data_path = o.data.empty() ? default_data_path() : o.data;
  CharData data = CharData::load(data_path, o.block_size);
  dsl::GptConfig cfg = o.model_config(std::int64_t(data.vocab.size()));
  std::filesystem::create_directories(o.out_dir);
  const std::string ck_path = o.out_dir + "/checkpoint.safetensors";

  ParamStore params;
  std::unique_ptr<Optimizer> optim = make_optimizer(o);
  std::mt19937_64 rng(o.seed);
  std::int64_t start = 0;
  std::string rng_state;  // of the checkpoint resumed from
  if (o.resume) {
    Checkpoint ck = load_checkpoint(ck_path);
    if (ck.vocab != data.vocab)
      throw InputError(fmt::format("{}: the checkpoint's vocabulary differs from that of {}", ck_path, data_path));
    if (config_to_json(ck.config) != config_to_json(cfg))
      throw InputError(fmt::format("{}: the checkpoint's model {} differs from the options' {}", ck_path,
                                   config_to_json(ck.config), config_to_json(cfg)));
    if (ck.optimizer != o.optimizer)
      throw InputError(fmt::format("{}: the checkpoint was trained with {}, not {}", ck_path, ck.optimizer, o.optimizer));
    if (ck.step > o.steps)
      throw InputError(fmt::format("{}: the checkpoint is at step {}, beyond --steps {}", ck_path, ck.step, o.steps));
    params = std::move(ck.params);
    optim->load_state(ck.optim_state, ck.step, param_shapes(params));
    rng_state = ck.rng_state;
    start = ck.step;
    fmt::print(out, "resuming {} at step {}\n", ck_path, start);
  }
  StepRunner runner(cfg, o.batch_size, o.block_size, params, /*training=*/true, o.seed);
  if (o.resume) {
    // The data RNG, then the dropout RNG (absent from older checkpoints).
    std::istringstream rs(rng_state);
    rs >> rng;
    std::mt19937_64 dropout_rng;
    if (rs >> dropout_rng) runner.dropout_rng() = dropout_rng;
  }
  // Projections into the residual stream start smaller (GPT-2's 1/sqrt(2 n_layer) scaling).
  params.init_missing(runner.graph(), o.seed);
  if (start == 0)
    for (auto& [name, t] : params.all())
      if (name.ends_with("attn.proj.weight") || name.ends_with("mlp.fc2.weight"))
        for (float& w : t.fspan()) w *= float(1.0 / std::sqrt(2.0 * double(std::max<std::int64_t>(1, cfg.n_layer))));

  fmt::print(out, "gradgraph train: {} ({} chars, vocab {}), {} parameters, {} layers x {} heads x {} dims, block {}\n",
             data_path, data.size, data.vocab.size(), params.count(), cfg.n_layer, cfg.n_head, cfg.n_embd,
             cfg.block_size);
  fmt::print(out, "plan: {} nodes, arena {:.1f} MiB (without reuse {:.1f} MiB); {} steps of batch {} with {} lr {}\n",
             runner.train_plan().order().size(), double(runner.train_plan().arena_bytes()) / (1 << 20),
             double(runner.train_plan().unshared_bytes()) / (1 << 20), o.steps, o.batch_size, o.optimizer, o.lr);
  std::fflush(out);  // before the progress bar (stderr) starts

  // The checkpoint after `step` optimizer steps: weights, optimizer state, both RNGs.
  auto save_at = [&](std::int64_t step) {
    Checkpoint ck{cfg, data.vocab, params, o.optimizer, optim->state(), step, "", o.to_json()};
    std::ostringstream rs;
    rs << rng << ' ' << runner.dropout_rng();
    ck.rng_state = rs.str();
    save_checkpoint(ck_path, ck);
  };
  std::vector<train::Series> curves(2);
  curves[0].name = "train";
  curves[1].name = "val";
  Progress progress(o.steps, o.quiet ? nullptr : stderr);
  std::vector<std::int32_t> x, y;
  const std::int64_t tokens_per_step = o.batch_size * o.block_size;
  auto t0 = std::chrono::steady_clock::now();
  TrainResult res;
  double ema_loss = NAN;
  for (std::int64_t step = start; step < o.steps; ++step) {
    sample_batch(data.train, o.batch_size, o.block_size, rng, x, y);
    const double loss = runner.forward_backward(x.data(), y.data());
    if (!std::isfinite(loss)) throw InputError(fmt::format("training diverged: loss is {} at step {}", loss, step));
    std::vector<ParamGrad> pg = runner.grads();
    clip_grad_norm(pg, o.clip);
    optim->step(pg, cosine_lr(step, o.warmup, o.steps, o.lr, o.min_lr));
    curves[0].x.push_back(double(step + 1));
    curves[0].y.push_back(loss);
    ema_loss = std::isnan(ema_loss) ? loss : 0.9 * ema_loss + 0.1 * loss;
    res.final_train_loss = loss;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress.update(step + 1, ema_loss, double((step + 1 - start) * tokens_per_step) / std::max(secs, 1e-9));
    if ((step + 1) % o.eval_interval == 0 && step + 1 < o.steps) {
      const double val = evaluate(runner, data.val, o.batch_size, o.block_size, o.eval_iters, o.seed + 1);
      curves[1].x.push_back(double(step + 1));
      curves[1].y.push_back(val);
      const std::string line = fmt::format("step {:>5}: train loss {:.4f}, val loss {:.4f}", step + 1, ema_loss, val);
      if (o.quiet) {
        fmt::print(out, "{}\n", line);
        std::fflush(out);
      } else {
        progress.message(line);
      }
      save_at(step + 1);
    }
  }
  progress.finish();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.steps = o.steps - start;
  res.tokens_per_sec = double(res.steps * tokens_per_step) / std::max(res.seconds, 1e-9);
  res.final_val_loss = evaluate(runner, data.val, o.batch_size, o.block_size, o.final_eval_iters, o.seed + 1);
  curves[1].x.push_back(double(o.steps));
  curves[1].y.push_back(res.final_val_loss);

  save_at(o.steps);
  write_csv(o.out_dir + "/loss.csv", curves);
  write_svg(o.out_dir + "/loss.svg", fmt::format("{} on {}", "gradgraph char transformer", data_path), "step",
            "loss", curves);
  fmt::print(out, "trained {} steps in {:.1f} s ({:.0f} tokens/s)\n", res.steps, res.seconds, res.tokens_per_sec);
  fmt::print(out, "wrote {}, {}/loss.csv, {}/loss.svg\n", ck_path, o.out_dir, o.out_dir);
  fmt::print(out, "val loss {:.4f}\n", res.final_val_loss);
  if (o.sample_tokens > 0) {
    SampleOptions so;
    so.tokens = o.sample_tokens;
    so.temperature = o.temperature;
    so.top_k = o.top_k;
    so.seed = o.seed;
    res.sample = sample_text(cfg, params, data.vocab, so);
    fmt::print(out, "--- sample ---\n{}\n--------------\n", res.sample);
  }
  std::fflush(out);
  return res;
}

}  // namespace gg::train
