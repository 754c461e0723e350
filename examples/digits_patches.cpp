// Patch input for images, the minimal-transformer tutorial's extension: a tiny transformer
// classifies the 8x8 handwritten digits (data/digits.csv). Each image is cut into p x p
// patches, row by row, and each patch is a token: patch_embedding -> + a learned positional
// embedding -> transformer blocks (no causal mask: every patch sees every other) -> mean over
// the patches -> layer_norm -> linear to 10 classes, trained with cross-entropy and AdamW.
// p = 4 by default (4 tokens of 16 pixels); --patch 2 (16 tokens of 4 pixels) reaches the
// same accuracy at the default budget but stays near chance for its first ~60 steps.
// The generic trainer runs it: the test set is its validation data, in larger batches (the
// model plans each batch shape once), and test accuracy is a metric. Writes the training and
// test loss curves (loss.csv, loss.svg: the test set is the "val" series), the accuracy curve
// (metrics.csv, metrics.svg) and the checkpoint into --out, and prints a results table.
// Checks: at the default step count, test accuracy >= 0.90; at fewer steps (the CTest run),
// only that the test loss fell and the accuracy beats chance (>= 0.30).
// Exits 2 with a one-line error if the data file is missing or a line is malformed.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "dsl/nn.h"
#include "train/checkpoint.h"
#include "train/data_path.h"
#include "train/trainer.h"

using namespace gg;
using namespace gg::dsl;

constexpr std::int64_t kSide = 8, kPixels = kSide * kSide, kClasses = 10;

struct Digits {
  std::vector<float> images;         // (N, 8, 8), pixels scaled to [0, 1]
  std::vector<std::int32_t> labels;  // (N), 0..9
  std::int64_t size() const { return std::int64_t(labels.size()); }
};

// Reads one image a line: 64 integer pixels in 0..16, then the label in 0..9.
// Throws std::runtime_error "<path>:<line>: <what is wrong>" on the first bad line.
static Digits load_digits(const std::string& path) {
  std::ifstream in(path);
  if (!in || std::filesystem::is_directory(path))
    throw std::runtime_error(fmt::format("cannot read {}: {}", path,
                                         std::filesystem::exists(path) ? "not a readable file" : "no such file"));
  Digits d;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto bad = [&](const std::string& what) { return std::runtime_error(fmt::format("{}:{}: {}", path, n, what)); };
    std::vector<std::string_view> fields;
    for (std::size_t at = 0;;) {
      const std::size_t comma = line.find(',', at);
      fields.push_back(std::string_view(line).substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    if (std::int64_t(fields.size()) != kPixels + 1)
      throw bad(fmt::format("expected {} comma-separated fields (64 pixels, then the label), got {}", kPixels + 1,
                            fields.size()));
    for (std::int64_t i = 0; i <= kPixels; ++i) {
      const std::string_view f = fields[std::size_t(i)];
      int v = 0;
      auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
      const int hi = i < kPixels ? 16 : 9;
      if (ec != std::errc{} || end != f.data() + f.size() || f.empty())
        throw bad(fmt::format("field {} is '{}', not an integer", i + 1, f));
      if (v < 0 || v > hi)
        throw bad(fmt::format("{} {} is out of range 0..{}", i < kPixels ? "pixel" : "label", v, hi));
      if (i < kPixels) d.images.push_back(float(v) / 16.f);
      else d.labels.push_back(v);
    }
  }
  if (d.size() < 12) throw std::runtime_error(fmt::format("{}: {} images, too few to split", path, d.size()));
  return d;
}

// The rows of `d` listed in `idx`, in that order.
static Digits take(const Digits& d, const std::vector<std::int64_t>& idx) {
  Digits out;
  for (std::int64_t i : idx) {
    out.images.insert(out.images.end(), d.images.begin() + i * kPixels, d.images.begin() + (i + 1) * kPixels);
    out.labels.push_back(d.labels[std::size_t(i)]);
  }
  return out;
}

// The patch transformer on a batch of "images" (B, 8, 8) f32 with "labels" (B) i32.
static train::Model digits_model(std::int64_t p, std::int64_t d_model, std::int64_t n_layer, std::int64_t n_head) {
  return train::Model("digits_patches", [=](train::ModelInputs& in) {
    const std::int64_t N = (kSide / p) * (kSide / p);                  // patches per image
    Expr x = patch_embedding(in["images"], p, d_model, "patch_emb");    // x: (B, N, d_model)
    x = x + param(in.graph(), "pos_emb", {N, d_model}, normal_init(0.02f));  // (N, d_model) broadcasts
    BlockOptions bo;
    bo.n_head = n_head;                                                 // no mask: attention over all patches
    for (std::int64_t i = 0; i < n_layer; ++i) x = transformer_block(x, fmt::format("blocks.{}", i), bo);
    x = mean(x, 1);                                                     // x: (B, d_model), pooled over patches
    x = layer_norm(x, "norm_f");                                        // x: (B, d_model)
    Expr logits = linear(x, kClasses, "head");                          // logits: (B, 10)
    return train::ModelOutputs{cross_entropy(logits, in["labels"]), {{"logits", logits}}};
  });
}

// The rows of `d` from `start`, `n` of them, as a batch.
static train::Batch batch_of(const Digits& d, std::int64_t start, std::int64_t n) {
  return {{"images", Tensor::f32({n, kSide, kSide}, std::span(d.images).subspan(std::size_t(start * kPixels),
                                                                                 std::size_t(n * kPixels)))},
          {"labels", Tensor::i32({n}, std::span(d.labels).subspan(std::size_t(start), std::size_t(n)))}};
}

// All of `d` in nearly equal batches of at most `max_batch` rows (sizes differ by at most 1,
// so the trainer's mean of batch losses is within a row's weight of the mean over rows).
static std::vector<train::Batch> eval_batches(const Digits& d, std::int64_t max_batch) {
  const std::int64_t k = (d.size() + max_batch - 1) / max_batch;
  std::vector<train::Batch> out;
  for (std::int64_t i = 0; i < k; ++i) {
    const std::int64_t start = d.size() * i / k, end = d.size() * (i + 1) / k;
    out.push_back(batch_of(d, start, end - start));
  }
  return out;
}

struct Score {
  double loss = 0, accuracy = 0;
};

// Mean cross-entropy and accuracy over every row of `batches` (evaluation pass).
static Score score(train::Model& m, const std::vector<train::Batch>& batches) {
  Score s;
  std::int64_t rows = 0;
  for (const train::Batch& b : batches) {
    std::map<std::string, Tensor> r = m.evaluate(b);
    const std::int64_t n = b.at("labels").shape()[0];
    const float* logits = r.at("logits").f();                          // logits: (n, 10)
    const std::int32_t* labels = static_cast<const std::int32_t*>(b.at("labels").data());
    s.loss += double(r.at("loss").f()[0]) * double(n);
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = logits + i * kClasses;
      s.accuracy += std::max_element(row, row + kClasses) - row == labels[i] ? 1 : 0;
    }
    rows += n;
  }
  s.loss /= double(rows);
  s.accuracy /= double(rows);
  return s;
}

int main(int argc, char** argv) {
  const std::int64_t default_steps = 1500;
  std::int64_t steps = default_steps, batch = 32, patch = 4, d_model = 32, n_layer = 2, n_head = 4;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  std::string out = "runs/digits_patches", data_path = "data/digits.csv";
  CLI::App app{"a tiny patch transformer classifies the 8x8 handwritten digits"};
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(std::int64_t(1), std::int64_t(10000000)));
  app.add_option("--out", out, "output directory");
  app.add_option("--data", data_path, "the digits CSV (64 pixels 0..16, then the label, a line)");
  app.add_option("--lr", lr, "peak learning rate (AdamW, warm-up then cosine)");
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 100000));
  app.add_option("--patch", patch, "patch side: 2 (16 patches of 4 pixels) or 4 (4 of 16)")->check(CLI::IsMember({2, 4}));
  app.add_option("--d-model", d_model, "model width");
  app.add_option("--n-layer", n_layer, "transformer blocks");
  app.add_option("--seed", seed, "initial weights and batches (the split is fixed)");
  CLI11_PARSE(app, argc, argv);
  auto t0 = std::chrono::steady_clock::now();

  // Data: the bundled data/digits.csv wherever it is (source, build or install tree).
  Digits all;
  try {
    if (app.count("--data") == 0) data_path = train::find_data_file("digits.csv");
    all = load_digits(data_path);
  } catch (const std::exception& e) {
    fmt::print(stderr, "digits_patches: {}\n", e.what());
    return 2;
  }
  // A fixed split, the same on every platform: Fisher-Yates with a seeded mt19937_64 (whose
  // output the standard fixes), one image in six held out for testing.
  std::vector<std::int64_t> order(std::size_t(all.size()));
  for (std::int64_t i = 0; i < all.size(); ++i) order[std::size_t(i)] = i;
  std::mt19937_64 split_rng(20240601);
  for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[split_rng() % (i + 1)]);
  const std::int64_t n_test = all.size() / 6;
  Digits test = take(all, {order.begin(), order.begin() + n_test});
  Digits train = take(all, {order.begin() + n_test, order.end()});

  // Batches: training images drawn at random; the test set in batches of up to 128, the
  // validation data of every evaluation; test accuracy as a metric.
  const std::vector<train::Batch> test_batches = eval_batches(test, 128), train_batches = eval_batches(train, 128);
  train::DataSource data;
  data.train = [&](std::mt19937_64& rng) {
    Digits b;
    for (std::int64_t i = 0; i < batch; ++i) {
      const std::int64_t r = std::int64_t(rng() % std::uint64_t(train.size()));
      b.images.insert(b.images.end(), train.images.begin() + r * kPixels, train.images.begin() + (r + 1) * kPixels);
      b.labels.push_back(train.labels[std::size_t(r)]);
    }
    return batch_of(b, 0, batch);                                      // images: (B, 8, 8), labels: (B)
  };
  data.val = [&](std::int64_t i) { return test_batches[std::size_t(i)]; };
  data.metrics = [&](train::Model& m) {
    return std::vector<std::pair<std::string, double>>{{"test accuracy", score(m, test_batches).accuracy}};
  };

  // The run: AdamW (weight decay 0.01), warm-up for a twentieth of the steps, cosine to
  // lr / 10, clip at 1.0, the test set evaluated ten times.
  train::TrainOptions o;
  o.out_dir = out, o.steps = steps, o.lr = lr, o.min_lr = lr / 10, o.warmup = steps / 20, o.weight_decay = 0.01;
  o.seed = std::int64_t(seed), o.quiet = true, o.eval_interval = std::max<std::int64_t>(1, steps / 10);
  o.eval_iters = o.final_eval_iters = std::int64_t(test_batches.size());

  train::Model m = digits_model(patch, d_model, n_layer, n_head);
  m.declare(test_batches[0]);
  m.init_params(seed);  // fit() keeps these
  const std::int64_t N = (kSide / patch) * (kSide / patch);
  fmt::print("digits: {} train, {} test from {}\n", train.size(), test.size(), data_path);
  fmt::print("{} patches of {}x{}, d_model {}, {} layers x {} heads, {} params; batch {}, {} steps, AdamW lr {}\n", N,
             patch, patch, d_model, n_layer, n_head, m.params().count(), batch, steps, lr);
  const Score before = score(m, test_batches);
  train::RunInfo info;
  info.title = fmt::format("patch transformer on 8x8 digits ({} patches of {}x{}); val = test set", N, patch, patch);
  try {
    train::fit(m, data, o, info);
  } catch (const train::InputError& e) {  // diverged: the curves are written
    fmt::print("{}\nclaim: training stays finite: DOES NOT HOLD\n", e.what());
    return 1;
  }
  const Score after = score(m, test_batches), on_train = score(m, train_batches);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The training loss is noisy per batch: report the mean of the last 50 steps.
  std::vector<double> train_curve;
  for (const train::Series& c : train::load_checkpoint(out + "/checkpoint.safetensors").curves)
    if (c.name == "train") train_curve = c.y;
  const std::size_t tail = std::min<std::size_t>(50, train_curve.size());
  double train_last = 0;
  for (std::size_t i = train_curve.size() - tail; i < train_curve.size(); ++i) train_last += train_curve[i];
  train_last /= double(tail);
  fmt::print("\n{:<22} {:>9} {:>9}\n", "", "loss", "accuracy");
  fmt::print("{:<22} {:>9.4f} {:>9.4f}\n", "test, before training", before.loss, before.accuracy);
  fmt::print("{:<22} {:>9.4f} {:>9}\n", fmt::format("train, last {} steps", tail), train_last, "");
  fmt::print("{:<22} {:>9.4f} {:>9.4f}\n", "train, after", on_train.loss, on_train.accuracy);
  fmt::print("{:<22} {:>9.4f} {:>9.4f}\n", "test, after", after.loss, after.accuracy);
  fmt::print("\n{:.1f} s in all\n", seconds);

  // The claim: >= 0.90 on the held-out digits at the full budget; a short run need only learn.
  const bool full = steps >= default_steps;
  const double bar = full ? 0.90 : 0.30;
  const bool fell = after.loss < before.loss;
  const bool holds = std::isfinite(after.loss) && fell && after.accuracy >= bar;
  fmt::print("claim: {}test accuracy {:.4f} >= {:.2f}: {}\n", full ? "" : "(short run) test loss fell and ",
             after.accuracy, bar, holds ? "holds" : "DOES NOT HOLD");
  return holds ? 0 : 1;
}
