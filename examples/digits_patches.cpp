// Patch input for images, the minimal-transformer tutorial's extension: a tiny transformer
// classifies the 8x8 handwritten digits (data/digits.csv). Each image is cut into p x p
// patches, row by row, and each patch is a token: patch_embedding -> + a learned positional
// embedding -> transformer blocks (no causal mask: every patch sees every other) -> mean over
// the patches -> layer_norm -> linear to 10 classes, trained with cross-entropy and AdamW.
// p = 4 by default (4 tokens of 16 pixels); --patch 2 (16 tokens of 4 pixels) reaches the
// same accuracy at the default budget but stays near chance for its first ~60 steps.
// Writes the training and test loss curves (CSV, SVG) and prints a results table.
// Checks: at the default step count, test accuracy >= 0.90; at fewer steps (the CTest run),
// only that the test loss fell and the accuracy beats chance (>= 0.30).
// Exits 2 with a one-line error if the data file is missing or a line is malformed.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "autodiff/optim.h"
#include "dsl/nn.h"
#include "ops/executor.h"
#include "train/plot.h"

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

struct Model {
  Expr images, labels;  // images: (B, 8, 8) f32, labels: (B) i32
  Expr logits, loss;    // logits: (B, 10), loss: scalar
};

// The patch transformer for a batch of B images. Parameters are bound by name, so a graph
// built again with another B shares them through the ParamStore.
static Model build_model(Graph& g, std::int64_t B, std::int64_t p, std::int64_t d_model, std::int64_t n_layer,
                         std::int64_t n_head) {
  const std::int64_t N = (kSide / p) * (kSide / p);                  // patches per image
  Model m;
  m.images = input(g, "images", {B, kSide, kSide});                   // images: (B, 8, 8)
  Expr x = patch_embedding(m.images, p, d_model, "patch_emb");        // x: (B, N, d_model)
  x = x + param(g, "pos_emb", {N, d_model}, normal_init(0.02f));      // (N, d_model) broadcasts
  BlockOptions bo;
  bo.n_head = n_head;                                                 // no mask: attention over all patches
  for (std::int64_t i = 0; i < n_layer; ++i) x = transformer_block(x, fmt::format("blocks.{}", i), bo);
  x = mean(x, 1);                                                     // x: (B, d_model), pooled over patches
  x = layer_norm(x, "norm_f");                                        // x: (B, d_model)
  m.logits = linear(x, kClasses, "head");                             // logits: (B, 10)
  m.labels = input(g, "labels", {B}, DType::i32);                     // labels: (B)
  m.loss = cross_entropy(m.logits, m.labels);
  return m;
}

struct Score {
  double loss = 0, accuracy = 0;
};

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

  // Data: the working directory's data/digits.csv, else the source tree's (CTest runs in build/).
  if (app.count("--data") == 0 && !std::filesystem::exists(data_path))
    data_path = std::string(GG_SOURCE_DIR) + "/data/digits.csv";
  Digits all;
  try {
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

  // Two graphs over the same parameters: a training step (loss and gradients) at the batch
  // size, and an evaluation pass (logits only; loss and accuracy are summed here) over a
  // larger batch.
  Graph g;
  Model m = build_model(g, batch, patch, d_model, n_layer, n_head);
  std::vector<Expr> ps = params(g);
  std::vector<Expr> grads = grad(m.loss, ps);
  ParamStore store;
  store.init_missing(g, seed);
  std::vector<NodeId> outputs = {m.loss.id};
  for (Expr d : grads) outputs.push_back(d.id);
  Executor step_plan(g, outputs, store);

  const std::int64_t E = 128;  // evaluation batch; the last one is padded with image 0
  Graph eg;
  Model em = build_model(eg, E, patch, d_model, n_layer, n_head);
  Executor eval_plan(eg, {em.logits.id}, store);
  auto evaluate = [&](const Digits& d) {  // mean cross-entropy and accuracy over all of d
    Score s;
    std::vector<float> xb(std::size_t(E * kPixels));
    for (std::int64_t start = 0; start < d.size(); start += E) {
      const std::int64_t n = std::min(E, d.size() - start);
      for (std::int64_t i = 0; i < E; ++i) {
        const std::int64_t r = i < n ? start + i : 0;
        std::copy_n(d.images.begin() + r * kPixels, kPixels, xb.begin() + i * kPixels);
      }
      eval_plan.set_input("images", xb);
      eval_plan.run();
      const float* logits = eval_plan.value(em.logits.id).f();   // logits: (E, 10)
      for (std::int64_t i = 0; i < n; ++i) {
        const float* row = logits + i * kClasses;
        const std::int32_t y = d.labels[std::size_t(start + i)];
        float mx = row[0];
        std::int32_t best = 0;
        for (std::int32_t c = 1; c < kClasses; ++c)
          if (row[c] > mx) mx = row[c], best = c;
        double z = 0;
        for (std::int32_t c = 0; c < kClasses; ++c) z += std::exp(double(row[c] - mx));
        s.loss += std::log(z) - double(row[y] - mx);           // -log_softmax(row)[y]
        s.accuracy += best == y ? 1 : 0;
      }
    }
    s.loss /= double(d.size());
    s.accuracy /= double(d.size());
    return s;
  };

  const std::int64_t N = (kSide / patch) * (kSide / patch);
  fmt::print("digits: {} train, {} test from {}\n", train.size(), test.size(), data_path);
  fmt::print("{} patches of {}x{}, d_model {}, {} layers x {} heads, {} params; batch {}, {} steps, AdamW lr {}\n", N,
             patch, patch, d_model, n_layer, n_head, store.count(), batch, steps, lr);

  // Training: minibatches drawn from a reshuffled pass over the training set.
  train::Series train_curve{"train loss", {}, {}}, test_curve{"test loss", {}, {}};
  const Score before = evaluate(test);
  test_curve.x.push_back(0);
  test_curve.y.push_back(before.loss);
  AdamW opt({.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.01});
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> pass(std::size_t(train.size()));
  for (std::int64_t i = 0; i < train.size(); ++i) pass[std::size_t(i)] = i;
  std::size_t next = pass.size();  // position in the current pass; past the end: reshuffle
  std::vector<float> xb(std::size_t(batch * kPixels));           // xb: (B, 8, 8)
  std::vector<std::int32_t> yb(static_cast<std::size_t>(batch));  // yb: (B)
  const std::int64_t eval_every = std::max<std::int64_t>(1, steps / 10);
  bool finite = true;
  for (std::int64_t step = 0; step < steps; ++step) {
    for (std::int64_t i = 0; i < batch; ++i) {
      if (next == pass.size()) {
        std::shuffle(pass.begin(), pass.end(), rng);
        next = 0;
      }
      const std::int64_t r = pass[next++];
      std::copy_n(train.images.begin() + r * kPixels, kPixels, xb.begin() + i * kPixels);
      yb[std::size_t(i)] = train.labels[std::size_t(r)];
    }
    step_plan.set_input("images", xb);
    step_plan.set_input("labels", yb);
    step_plan.run();
    const double loss = step_plan.scalar(m.loss.id);
    train_curve.x.push_back(double(step + 1));
    train_curve.y.push_back(loss);
    if (!std::isfinite(loss)) {  // diverged: the curve ends here
      finite = false;
      break;
    }
    std::vector<ParamGrad> pg;
    for (std::size_t i = 0; i < ps.size(); ++i)
      pg.push_back({ps[i].name(), &store.at(ps[i].name()), step_plan.value(grads[i].id).fspan()});
    clip_grad_norm(pg, 1.0);
    opt.step(pg, cosine_lr(step, steps / 20, steps, lr, lr / 10));
    if ((step + 1) % eval_every == 0 || step + 1 == steps) {
      test_curve.x.push_back(double(step + 1));
      test_curve.y.push_back(evaluate(test).loss);
    }
  }
  const Score after = evaluate(test), on_train = evaluate(train);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::filesystem::create_directories(out);
  train::write_csv(out + "/loss.csv", {train_curve, test_curve});
  train::write_svg(out + "/loss.svg", fmt::format("patch transformer on 8x8 digits ({} patches of {}x{})", N, patch, patch),
                   "step", "cross-entropy", {train_curve, test_curve});

  // The training loss is noisy per batch: report the mean of the last 50 steps.
  const std::size_t tail = std::min<std::size_t>(50, train_curve.y.size());
  double train_last = 0;
  for (std::size_t i = train_curve.y.size() - tail; i < train_curve.y.size(); ++i) train_last += train_curve.y[i];
  train_last /= double(tail);
  fmt::print("\n{:<22} {:>9} {:>9}\n", "", "loss", "accuracy");
  fmt::print("{:<22} {:>9.4f} {:>9.4f}\n", "test, before training", before.loss, before.accuracy);
  fmt::print("{:<22} {:>9.4f} {:>9}\n", fmt::format("train, last {} steps", tail), train_last, "");
  fmt::print("{:<22} {:>9.4f} {:>9.4f}\n", "train, after", on_train.loss, on_train.accuracy);
  fmt::print("{:<22} {:>9.4f} {:>9.4f}\n", "test, after", after.loss, after.accuracy);
  fmt::print("\n{:.1f} s; wrote {}/loss.csv, {}/loss.svg\n", seconds, out, out);

  // The claim: >= 0.90 on the held-out digits at the full budget; a short run need only learn.
  const bool full = steps >= default_steps;
  const double bar = full ? 0.90 : 0.30;
  const bool fell = after.loss < before.loss;
  const bool holds = finite && std::isfinite(after.loss) && fell && after.accuracy >= bar;
  fmt::print("claim: {}test accuracy {:.4f} >= {:.2f}{}: {}\n", full ? "" : "(short run) test loss fell and ",
             after.accuracy, bar, finite ? "" : " (a training loss was not finite)", holds ? "holds" : "DOES NOT HOLD");
  return holds ? 0 : 1;
}
