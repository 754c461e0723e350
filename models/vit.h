// A Vision Transformer declared with the DSL, and the job that trains it on the 8x8 digits
// with the generic trainer (`gradgraph train-vit`). An image is cut into p x p patches; each
// patch is a "word": projected linearly to d_model, given its 2-D position (a fixed
// sinusoidal table over row and column, or a learned table), optionally preceded by a class
// token, then pre-LN transformer blocks without a mask, a final norm, pooling (the class
// token or the mean over patches) and a linear head with cross-entropy.
// Not here: the data (models/digits.h), the loop (train/trainer.h).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "../dsl/nn.h"
#include "../train/model.h"
#include "../train/options.h"
#include "../train/trainer.h"

namespace gg::models {

struct VitConfig {
  std::int64_t image_size = 8;   // square images (B, image_size, image_size), one channel
  std::int64_t n_classes = 10;
  std::int64_t patch = 4;        // patch side; must divide image_size
  std::int64_t d_model = 64, n_layer = 2, n_head = 4;
  enum class Pos { sinusoidal, learned } pos = Pos::sinusoidal;
  enum class Pool { cls, mean } pool = Pool::mean;
  // Amplitude of the sinusoidal table (1: the unit sinusoids of the original transformer).
  float pos_scale = 1.f;
  // Std of the patch projection's weights; 0 = 1/sqrt(patch * patch) (the fan-in), so a
  // patch's embedding is of the order of its pixels, not drowned by the position table:
  // at N(0, 0.02) a unit table is tens of times larger than a 2x2 patch's embedding, and that ViT
  // learns slowly (issue 7).
  float patch_init = 0.f;
  float dropout = 0.f;           // on attention weights and on the embedded patches, in training
  float layernorm_eps = 1e-5f;
  static const train::OptionTable<VitConfig>& table();
};

std::string to_json(const VitConfig& c);

struct Vit {
  dsl::Expr logits;  // (B, n_classes)
  dsl::Expr pred;    // (B) i32, argmax of the logits
  dsl::Expr loss;    // scalar (only with labels)
};

// The model on images (B, image_size, image_size) f32 and, for the loss, labels (B) i32 in
// [0, n_classes). Parameters: "patch_emb.weight" (D, p p), "patch_emb.bias" (D), with
// learned positions "pos_emb.weight" (N, D), with pool = cls "cls_token" (1, 1, D),
// "blocks.<i>.*" (transformer_block), "norm_f.weight"/"bias" (D), "head.weight" (n_classes, D),
// "head.bias" (n_classes). Throws GraphError for images of another size.
Vit build_vit(const VitConfig& c, dsl::Expr images, std::optional<dsl::Expr> labels, bool training = false);

// The ViT as a trainable model (kind "vit"): batches hold "images" and, for a loss, "labels";
// outputs "logits" and "pred".
train::Model vit_model(const VitConfig& c);

// The parameter table (names and shapes, in declaration order).
std::vector<train::ParamInfo> vit_params(const VitConfig& c);

// ---- the job: train-vit ------------------------------------------------------------------

// The job's own options (the model's are VitConfig's, the run's TrainOptions').
struct VitJobOptions {
  std::string data;               // digits CSV; empty = the bundled data/digits.csv
  std::int64_t batch_size = 64;
  std::int64_t test_batch = 128;  // the test set is evaluated whole, in batches of at most this
  std::int64_t shift = 1;         // training images are shifted by up to this many pixels (0 = off)
  static const train::OptionTable<VitJobOptions>& table();
};

// The job's run defaults (out_dir runs/vit, steps, learning rate, ...). The test set is the
// validation data and is always evaluated whole: run_vit sets eval_iters and
// final_eval_iters to its number of batches.
train::TrainOptions vit_train_defaults();

struct VitResult {
  train::FitResult fit;
  double test_accuracy = 0;
  std::array<std::array<std::int64_t, 10>, 10> confusion{};  // [true label][predicted]
  std::int64_t n_train = 0, n_test = 0;
};

// Loads the digits, splits them (models/digits.h), trains the ViT with train::fit (test
// accuracy is a metric at every evaluation; loss.csv/svg and metrics.csv/svg go to
// t.out_dir), then prints "test accuracy X%" and the confusion matrix to `out`.
// Throws InputError for bad options or data (naming the file and line).
VitResult run_vit(const VitJobOptions& o, VitConfig model, train::TrainOptions t, std::FILE* out = stdout);

}  // namespace gg::models
