// build_vit(): the Vision Transformer top to bottom; its option table; the train-vit job
// (digits, fixed split, augmentation by small shifts, test accuracy and confusion matrix).
#include "models/vit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "dsl/transformer.h"
#include "models/digits.h"

namespace gg::models {

using namespace gg::dsl;
using train::InputError;

const train::OptionTable<VitConfig>& VitConfig::table() {
  using C = VitConfig;
  using train::choice;
  using train::opt;
  static const train::OptionTable<C> t{
      {opt("image_size", &C::image_size, "Image side in pixels (square, one channel)").at_least(1).at_most(1 << 14),
       opt("n_classes", &C::n_classes, "Classes").at_least(2).at_most(1 << 20),
       opt("patch", &C::patch, "Patch side in pixels (2: 16 patches of 4 pixels; 4: 4 patches of 16)")
           .at_least(1)
           .at_most(1 << 14),
       opt("d_model", &C::d_model, "Width of the patch embeddings (divisible by 4 and by n_head)").at_least(4).at_most(1 << 16),
       opt("n_layer", &C::n_layer, "Transformer blocks").at_least(0).at_most(1024),
       opt("n_head", &C::n_head, "Attention heads").at_least(1).at_most(1 << 16),
       choice("pos", &C::pos, {{"sinusoidal", C::Pos::sinusoidal}, {"learned", C::Pos::learned}},
              "2-D position encoding: sinusoids over row and column, or a learned table"),
       choice("pool", &C::pool, {{"cls", C::Pool::cls}, {"mean", C::Pool::mean}},
              "Pooling: a class token, or the mean over the patches"),
       opt("pos_scale", &C::pos_scale, "Amplitude of the sinusoidal position table").at_least(0).at_most(100),
       opt("patch_init", &C::patch_init, "Std of the patch projection's weights (0 = 1/sqrt(patch*patch))")
           .at_least(0)
           .at_most(100),
       opt("dropout", &C::dropout, "Dropout on attention weights and embedded patches").at_least(0).below(1),
       opt("layernorm_eps", &C::layernorm_eps, "LayerNorm epsilon").above(0).at_most(1)},
      [](const C& c) -> std::pair<std::string, std::string> {
        if (c.image_size % c.patch != 0)
          return {"patch", fmt::format("{} does not divide image_size = {}", c.patch, c.image_size)};
        if (c.d_model % 4 != 0)
          return {"d_model", fmt::format("{} is not divisible by 4 (the 2-D table gives rows and columns half each)",
                                         c.d_model)};
        if (c.d_model % c.n_head != 0)
          return {"d_model", fmt::format("{} is not divisible by n_head = {}", c.d_model, c.n_head)};
        return {};
      }};
  return t;
}

std::string to_json(const VitConfig& c) { return VitConfig::table().to_json(&c); }

Vit build_vit(const VitConfig& c, Expr images, std::optional<Expr> labels, bool training) {
  VitConfig::table().validate(&c, "vit");
  Graph& g = *images.g;
  const std::int64_t S = c.image_size, P = c.patch, D = c.d_model, side = S / P;
  const Shape& is = images.shape();
  if (is.size() != 3 || is[1] != S || is[2] != S)
    throw GraphError(fmt::format("vit: images must be (B, {}, {}), got {}", S, S, to_string(is)));
  const std::int64_t B = is[0];
  const float w_std = c.patch_init > 0 ? c.patch_init : float(1.0 / double(P));  // 1/sqrt(P*P)
  Expr x = patch_embedding(images, P, D, "patch_emb", true, normal_init(w_std));  // x: (B, N, D)
  if (c.pos == VitConfig::Pos::sinusoidal)
    x = x + positional_encoding_2d(g, side, side, D) * c.pos_scale;               // (N, D) broadcasts
  else
    x = x + positional_embedding_2d(g, side, side, D, "pos_emb");                 // (N, D) broadcasts
  if (c.pool == VitConfig::Pool::cls) {
    Expr cls = param(g, "cls_token", {1, 1, D}, normal_init(0.02f));              // cls: (1, 1, D)
    x = concat({expand(cls, {B, 1, D}), x}, 1);                                   // x: (B, 1 + N, D)
  }
  x = dropout(x, c.dropout, training);
  BlockOptions bo;
  bo.n_head = c.n_head;
  bo.eps = c.layernorm_eps;
  bo.attn.dropout = c.dropout;  // no mask: every patch sees every other
  bo.attn.training = training;
  for (std::int64_t i = 0; i < c.n_layer; ++i) x = transformer_block(x, fmt::format("blocks.{}", i), bo);
  x = layer_norm(x, "norm_f", c.layernorm_eps);                                   // x: (B, T, D)
  Expr pooled = c.pool == VitConfig::Pool::cls ? reshape(slice(x, 1, 0, 1), {B, D})  // the class token: (B, D)
                                               : mean(x, 1);                        // mean over patches: (B, D)
  Vit m;
  m.logits = linear(pooled, c.n_classes, "head");                                 // logits: (B, n_classes)
  m.pred = argmax(m.logits, -1);                                                  // pred: (B) i32
  if (labels) {
    m.loss = cross_entropy(m.logits, *labels);
    g.set_name(m.loss.id, "loss");
  }
  return m;
}

train::Model vit_model(const VitConfig& c) {
  VitConfig::table().validate(&c, "vit");
  return train::Model(
      "vit",
      [c](train::ModelInputs& in) {
        std::optional<Expr> labels;
        if (in.has("labels")) labels = in["labels"];
        Vit m = build_vit(c, in["images"], labels, in.training());
        return train::ModelOutputs{m.loss, {{"logits", m.logits}, {"pred", m.pred}}};
      },
      to_json(c));
}

std::vector<train::ParamInfo> vit_params(const VitConfig& c) {
  train::Model m = vit_model(c);
  return m.declare({{"images", Tensor({1, c.image_size, c.image_size}, DType::f32)}});
}

// ---- the job ---------------------------------------------------------------------------

const train::OptionTable<VitJobOptions>& VitJobOptions::table() {
  using O = VitJobOptions;
  using train::opt;
  static const train::OptionTable<O> t{
      {opt("data", &O::data, "Digits CSV: 64 pixels 0..16, then the label, a line (default: the bundled digits.csv)").reads_file(),
       opt("batch_size", &O::batch_size, "Training images per step").at_least(1).at_most(1 << 20),
       opt("test_batch", &O::test_batch, "Test images per evaluation batch").at_least(1).at_most(1 << 20),
       opt("shift", &O::shift, "Shift training images by up to this many pixels (0 = no augmentation)")
           .at_least(0)
           .at_most(4)}};
  return t;
}

train::TrainOptions vit_train_defaults() {
  train::TrainOptions t;
  t.out_dir = "runs/vit";
  t.steps = 3000;
  t.warmup = 100;
  t.lr = 2e-3;
  t.min_lr = 1e-4;
  t.weight_decay = 0.05;
  t.clip = 1.0;
  t.eval_interval = 500;
  return t;
}

namespace {

constexpr std::int64_t kSide = Digits::side, kPixels = Digits::pixels, kClasses = Digits::classes;

// Rows [start, start + n) of `d` as a batch: images (n, 8, 8), labels (n).
train::Batch batch_of(const Digits& d, std::int64_t start, std::int64_t n) {
  return {{"images", Tensor::f32({n, kSide, kSide}, std::span(d.images).subspan(std::size_t(start * kPixels),
                                                                                 std::size_t(n * kPixels)))},
          {"labels", Tensor::i32({n}, std::span(d.labels).subspan(std::size_t(start), std::size_t(n)))}};
}

// All of `d` in nearly equal batches of at most `max_batch` rows.
std::vector<train::Batch> whole(const Digits& d, std::int64_t max_batch) {
  const std::int64_t k = (d.size() + max_batch - 1) / max_batch;
  std::vector<train::Batch> out;
  for (std::int64_t i = 0; i < k; ++i) {
    const std::int64_t start = d.size() * i / k, end = d.size() * (i + 1) / k;
    out.push_back(batch_of(d, start, end - start));
  }
  return out;
}

// `n` training images drawn with `rng`, each shifted by (dy, dx) in [-shift, shift]^2
// (pixels shifted in from outside are 0, the background).
train::Batch random_batch(const Digits& d, std::int64_t n, std::int64_t shift, std::mt19937_64& rng) {
  std::vector<float> img(std::size_t(n * kPixels), 0.f);
  std::vector<std::int32_t> lab(static_cast<std::size_t>(n));
  const std::uint64_t span = std::uint64_t(2 * shift + 1);
  for (std::int64_t b = 0; b < n; ++b) {
    const std::int64_t r = std::int64_t(rng() % std::uint64_t(d.size()));
    std::int64_t dy = 0, dx = 0;
    if (shift > 0) dy = std::int64_t(rng() % span) - shift, dx = std::int64_t(rng() % span) - shift;
    const float* src = d.images.data() + r * kPixels;
    float* dst = img.data() + b * kPixels;
    for (std::int64_t y = 0; y < kSide; ++y)
      for (std::int64_t x = 0; x < kSide; ++x) {
        const std::int64_t sy = y - dy, sx = x - dx;
        if (sy >= 0 && sy < kSide && sx >= 0 && sx < kSide) dst[y * kSide + x] = src[sy * kSide + sx];
      }
    lab[std::size_t(b)] = d.labels[std::size_t(r)];
  }
  return {{"images", Tensor::f32({n, kSide, kSide}, img)}, {"labels", Tensor::i32({n}, lab)}};
}

}  // namespace

VitResult run_vit(const VitJobOptions& opts, VitConfig model, train::TrainOptions t, std::FILE* out) {
  VitJobOptions o = opts;
  VitJobOptions::table().validate(&o, "options");
  model.image_size = kSide;
  model.n_classes = kClasses;
  VitConfig::table().validate(&model, "options");
  const std::string path = o.data.empty() ? default_digits_path() : o.data;
  const Digits all = load_digits(path);
  const DigitsSplit split = split_rows(all.size());
  const Digits train_set = take_rows(all, split.train), test_set = take_rows(all, split.test);
  const std::vector<train::Batch> test_batches = whole(test_set, o.test_batch);
  t.eval_iters = t.final_eval_iters = std::int64_t(test_batches.size());  // the whole test set, every time

  VitResult r;
  r.n_train = train_set.size();
  r.n_test = test_set.size();
  train::DataSource src;
  src.train = [&](std::mt19937_64& rng) { return random_batch(train_set, o.batch_size, o.shift, rng); };
  src.val = [&](std::int64_t i) { return test_batches[std::size_t(i) % test_batches.size()]; };
  // Test accuracy from the model's own argmax; the confusion matrix of the last call is kept
  // (fit's last call is its final evaluation).
  src.metrics = [&](train::Model& m) {
    r.confusion = {};
    std::int64_t right = 0;
    for (const train::Batch& b : test_batches) {
      std::map<std::string, Tensor> res = m.evaluate(b);
      const std::int32_t* pred = res.at("pred").i();
      const std::int32_t* lab = b.at("labels").i();
      for (std::int64_t i = 0; i < b.at("labels").shape()[0]; ++i) {
        ++r.confusion[std::size_t(lab[i])][std::size_t(pred[i])];
        right += pred[i] == lab[i];
      }
    }
    r.test_accuracy = double(right) / double(test_set.size());
    return std::vector<std::pair<std::string, double>>{{"test_accuracy", r.test_accuracy}};
  };
  src.item_name = "img";

  const std::int64_t side = model.image_size / model.patch;
  fmt::print(out,
             "gradgraph train-vit: {} ({} train, {} test), {} patches of {}x{}, d_model {}, {} layers x {} heads, "
             "{} positions, {} pooling, batch {}\n",
             path, r.n_train, r.n_test, side * side, model.patch, model.patch, model.d_model, model.n_layer,
             model.n_head, model.pos == VitConfig::Pos::sinusoidal ? "sinusoidal" : "learned",
             model.pool == VitConfig::Pool::cls ? "class-token" : "mean", o.batch_size);
  train::Model m = vit_model(model);
  train::RunInfo info;
  info.title = fmt::format("ViT on 8x8 digits ({} patches of {}x{}); val = test set", side * side, model.patch,
                           model.patch);
  info.metadata["job"] = "vit_digits";
  r.fit = train::fit(m, src, t, info, out);

  fmt::print(out, "test accuracy {:.2f}% ({} of {})\n", 100.0 * r.test_accuracy,
             std::llround(r.test_accuracy * double(r.n_test)), r.n_test);
  fmt::print(out, "confusion matrix (rows: true digit, columns: predicted)\n     ");
  for (std::int64_t j = 0; j < kClasses; ++j) fmt::print(out, "{:>4}", j);
  fmt::print(out, "\n");
  for (std::int64_t i = 0; i < kClasses; ++i) {
    fmt::print(out, "{:>4} ", i);
    for (std::int64_t j = 0; j < kClasses; ++j) fmt::print(out, "{:>4}", r.confusion[std::size_t(i)][std::size_t(j)]);
    fmt::print(out, "\n");
  }
  std::fflush(out);
  return r;
}

}  // namespace gg::models
