// A variational autoencoder on the bundled 8x8 digits, with its noise drawn in the graph:
// z = mu + exp(logvar / 2) * random_normal(...), so the gradient flows to mu and logvar
// through the reparameterisation, and the noise comes from the run's generator (a resumed
// run draws the same). The loss is the negative ELBO per image: a Bernoulli reconstruction
// term (cross-entropy from logits, through softplus) plus the KL divergence of q(z|x) from
// N(0, I); both are reported as metrics, read from the evaluation pass's outputs
// (DataSource::batch_metrics), with no second pass. Exits 1 unless the validation loss ends
// below --expect (when given).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "dsl/nn.h"
#include "models/digits.h"
#include "train/trainer.h"

using namespace gg;
using namespace gg::dsl;

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.steps = 3000, o.lr = 2e-3, o.min_lr = 2e-4, o.warmup = 100, o.weight_decay = 0, o.quiet = true;
  o.eval_interval = 500, o.eval_iters = 4, o.final_eval_iters = 4;
  o.out_dir = "runs/vae_digits";
  std::int64_t latent = 8, hidden = 128, batch = 64;
  double expect = 0;
  CLI::App app{"A variational autoencoder on the 8x8 digits, noise in the graph"};
  app.add_option("--steps", o.steps, "training steps")->check(CLI::Range(1, 1000000));
  app.add_option("--latent", latent, "latent dimensions")->check(CLI::Range(1, 256));
  app.add_option("--hidden", hidden, "hidden width")->check(CLI::Range(1, 4096));
  app.add_option("--out-dir", o.out_dir, "checkpoint and curves");
  app.add_flag("--resume", o.resume, "continue from the checkpoint in --out-dir");
  app.add_option("--expect", expect, "exit 1 unless the final validation loss is below this (0: no check)");
  CLI11_PARSE(app, argc, argv);
  try {
    const models::Digits all = models::load_digits(models::default_digits_path());
    const models::DigitsSplit split = models::split_rows(all.size());
    const models::Digits train_set = models::take_rows(all, split.train), test_set = models::take_rows(all, split.test);
    constexpr std::int64_t P = models::Digits::pixels;

    train::Model vae(
        "vae_digits",
        [&](train::ModelInputs& in) {
          Expr x = in["x"];  // (B, 64) in [0, 1]
          const std::int64_t B = x.shape()[0];
          Expr h = relu(linear(x, hidden, "enc.fc"));
          Expr mu = linear(h, latent, "enc.mu"), logvar = linear(h, latent, "enc.logvar");  // (B, latent)
          Expr z = mu + exp(0.5f * logvar) * random_normal(in.graph(), {B, latent});
          Expr logits = linear(relu(linear(z, hidden, "dec.fc")), P, "dec.out");  // (B, 64)
          // -log p(x|z) for pixels in [0, 1]: softplus(l) - x l, summed over the pixels.
          Expr recon = sum_all(softplus(logits) - x * logits) * (1.f / float(B));
          Expr kl = sum_all(exp(logvar) + mu * mu - 1.f - logvar) * (0.5f / float(B));
          return train::ModelOutputs{recon + kl, {{"recon", recon}, {"kl", kl}}};
        },
        fmt::format("{{\"latent\": {}, \"hidden\": {}}}", latent, hidden));

    auto rows = [&](const models::Digits& d, std::int64_t first, std::int64_t n, std::mt19937_64* rng) {
      std::vector<float> v(std::size_t(n * P));
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t r = rng ? std::int64_t((*rng)() % std::uint64_t(d.size())) : (first + i) % d.size();
        std::copy_n(d.images.begin() + r * P, P, v.begin() + i * P);
      }
      return train::Batch{{"x", Tensor::f32({n, P}, v)}};
    };
    train::DataSource data;
    data.train = [&](std::mt19937_64& rng) { return rows(train_set, 0, batch, &rng); };
    data.val = [&](std::int64_t i) { return rows(test_set, i * 90, 90, nullptr); };
    data.items = [](const train::Batch& b) { return b.at("x").shape()[0]; };
    data.item_name = "img";
    data.batch_metrics = [](const train::Batch&, const std::map<std::string, Tensor>& out) {
      return std::vector<std::pair<std::string, double>>{{"recon", out.at("recon").f()[0]}, {"kl", out.at("kl").f()[0]}};
    };
    const train::FitResult r = train::fit(vae, data, o, {.title = "VAE on 8x8 digits"});
    fmt::print("negative ELBO per image: {:.2f} nats (reconstruction {:.2f} + KL {:.2f}); {} pixels at the start: {:.1f}\n",
               r.final_val_loss, r.metrics.at(0).second, r.metrics.at(1).second, P, double(P) * std::log(2.0));
    return expect > 0 && !(r.final_val_loss < expect) ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "vae_digits: {}\n", e.what());
    return 1;
  }
}
