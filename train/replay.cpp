// The replay loop: forward and backward, clip, step; nothing else.
#include "train/replay.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>

namespace gg::train {

void ReplayOptions::validate() const {
  if (optimizer != "sgd" && optimizer != "adamw")
    throw InputError(fmt::format("--optimizer must be sgd or adamw, got '{}'", optimizer));
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1))
    throw InputError(fmt::format("--betas must both be in [0, 1), got {},{}", beta1, beta2));
  if (!(lr > 0 && std::isfinite(lr))) throw InputError(fmt::format("--lr must be > 0, got {}", lr));
  if (!(momentum >= 0 && momentum < 1)) throw InputError(fmt::format("--momentum must be in [0, 1), got {}", momentum));
  if (!(eps > 0 && std::isfinite(eps))) throw InputError(fmt::format("--eps must be > 0, got {}", eps));
  if (!(weight_decay >= 0 && std::isfinite(weight_decay)))
    throw InputError(fmt::format("--weight-decay must be >= 0, got {}", weight_decay));
  if (!(clip >= 0)) throw InputError(fmt::format("--clip must be >= 0 (0 = off), got {}", clip));
}

ReplayResult replay(Model& m, const std::vector<Batch>& batches, const ReplayOptions& o) {
  o.validate();
  std::unique_ptr<Optimizer> opt;
  if (o.optimizer == "sgd") opt = std::make_unique<Sgd>(o.momentum);
  else opt = std::make_unique<AdamW>(AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
  ReplayResult res;
  for (const Batch& b : batches) {
    res.losses.push_back(float(m.forward_backward(b)));
    std::vector<ParamGrad> pg = m.grads();
    const double norm = grad_norm(pg);
    res.grad_norms.push_back(float(norm));
    opt->step(pg, o.lr, clip_scale(norm, o.clip));  // clipping inside the update's pass
  }
  return res;
}

}  // namespace gg::train
