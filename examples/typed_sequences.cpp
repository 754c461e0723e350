// A small model written with compile-time dimensions (dsl/typed.h), trained end to end by
// fit(): a one-block causal transformer learns to continue arithmetic sequences mod 16
// (x_t = a + s t, the step s in {1, 2, 3, 5} drawn per sequence), so after two tokens every
// next token is known, but only by looking back: attention is needed. The width, heads,
// vocabulary and context are in the types; batch and sequence length are run-time dims
// (training batches come in two lengths). Mixing two fixed dims up
// (say, a head of 64 features where 48 come in) does not compile.
// Checks: at the default step count, next-token accuracy (positions 1 on) >= 0.95; at
// fewer steps (the CTest run), only that the validation loss fell below log 16 - 0.5.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>

#include "dsl/typed.h"
#include "train/trainer.h"

using namespace gg;
using namespace gg::dsl::typed;

constexpr std::int64_t kVocab = 16, kWidth = 32, kHeads = 4, kMaxLen = 32;
using Tokens = T<Batch, Seq>;                        // i32 token ids
using Hidden = T<Batch, Seq, Dim<kWidth>>;
using Logits = T<Batch, Seq, Dim<kVocab>>;

// n sequences of length len; "y" is "x" shifted by one, its first entry ignored (-1):
// a next token after one token cannot be known.
static train::Batch sequences(std::mt19937_64& rng, std::int64_t n, std::int64_t len) {
  const int steps[] = {1, 2, 3, 5};
  std::vector<std::int32_t> x, y;
  for (std::int64_t b = 0; b < n; ++b) {
    const std::int64_t a = std::int64_t(rng() % kVocab), s = steps[rng() % 4];
    for (std::int64_t t = 0; t < len; ++t) {
      x.push_back(std::int32_t((a + s * t) % kVocab));
      y.push_back(t == 0 ? -1 : std::int32_t((a + s * (t + 1)) % kVocab));
    }
  }
  return {{"x", Tensor::i32({n, len}, x)}, {"y", Tensor::i32({n, len}, y)}};
}

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.steps = 400, o.lr = 3e-3, o.warmup = 20, o.min_lr = 3e-4, o.weight_decay = 0.0, o.quiet = true;
  o.eval_interval = 100, o.eval_iters = 4, o.final_eval_iters = 4;
  o.out_dir = "runs/typed_sequences";
  const std::int64_t default_steps = o.steps;
  CLI::App app{"a typed transformer continues arithmetic sequences"};
  app.add_option("--steps", o.steps, "training steps");
  app.add_option("--out", o.out_dir, "output directory");
  CLI11_PARSE(app, argc, argv);

  train::Model model("typed_sequences", [](train::ModelInputs& in) {
    Graph& g = in.graph();
    const std::int64_t len = in.shape("x")[1];
    Tokens x(in["x"]);                                                      // x: (B, S), checked: rank 2
    Hidden h = embedding<kVocab, kWidth>(x, "tok_emb");                     // h: (B, S, 32)
    auto pos = param<Dim<kMaxLen>, Dim<kWidth>>(g, "pos_emb", dsl::normal_init(0.02f));
    h = h + T<Seq, Dim<kWidth>>(dsl::slice(pos, 0, 0, len));               // (S, 32) broadcasts
    dsl::BlockOptions bo;
    bo.attn.mask = dsl::causal_mask(g, len);                                // token t sees 0..t
    h = transformer_block<kHeads>(h, "block", bo);                          // h: (B, S, 32)
    Logits logits = linear<kVocab>(layer_norm(h, "norm_f"), "head");       // logits: (B, S, 16)
    T<> loss = cross_entropy(logits, Tokens(in["y"]));
    return train::ModelOutputs{loss, {{"logits", logits}}};
  });

  // Training on sequences of 12 or 20 (two plans, one model), validation on 4 fixed batches
  // of 64 sequences of 20.
  std::vector<train::Batch> val;
  std::mt19937_64 val_rng(7);
  for (int i = 0; i < 4; ++i) val.push_back(sequences(val_rng, 64, 20));
  train::DataSource data;
  data.train = [](std::mt19937_64& rng) { return sequences(rng, 32, rng() % 2 ? 12 : 20); };
  data.val = [&](std::int64_t i) { return val[std::size_t(i % 4)]; };
  train::FitResult r = train::fit(model, data, o);

  // Next-token accuracy over the validation batches, positions 1 on.
  std::int64_t right = 0, total = 0;
  for (const train::Batch& b : val) {
    auto out = model.evaluate(b);
    const float* logits = out.at("logits").f();                             // (64, 20, 16)
    const auto* y = static_cast<const std::int32_t*>(b.at("y").data());
    for (std::int64_t i = 0; i < b.at("y").numel(); ++i) {
      if (y[i] < 0) continue;
      const float* row = logits + i * kVocab;
      right += std::max_element(row, row + kVocab) - row == y[i];
      ++total;
    }
  }
  const double accuracy = double(right) / double(total), chance_loss = std::log(double(kVocab));
  fmt::print("{} steps: validation loss {:.4f} (chance {:.4f}), next-token accuracy {:.3f}\n", r.steps,
             r.final_val_loss, chance_loss, accuracy);
  const bool ok = o.steps >= default_steps ? accuracy >= 0.95 : r.final_val_loss < chance_loss - 0.5;
  fmt::print("{}\n", ok ? "learned" : "NOT learned");
  return ok ? 0 : 1;
}
