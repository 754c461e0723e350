// SGD, AdamW, clipping and the learning-rate schedule: plain loops over each parameter,
// element by element, in the order PyTorch evaluates them (so results match to rounding).
#include "autodiff/optim.h"

#include <cmath>
#include <numbers>

#include "ops/parallel.h"

namespace gg {

double clip_grad_norm(std::span<const ParamGrad> pg, double max_norm) {
  double ss = 0;
  for (const ParamGrad& p : pg) {
    const std::int64_t n = p.param->numel();
    for (std::int64_t i = 0; i < n; ++i) ss += double(p.grad[i]) * double(p.grad[i]);
  }
  const double norm = std::sqrt(ss);
  if (max_norm > 0) {
    const float scale = float(std::min(1.0, max_norm / (norm + 1e-6)));
    if (scale < 1.f)
      for (const ParamGrad& p : pg)
        for (std::int64_t i = 0, n = p.param->numel(); i < n; ++i) p.grad[i] *= scale;
  }
  return norm;
}

void Sgd::step(std::span<const ParamGrad> pg, double lr) {
  ++t_;
  const float lrf = float(lr), m = float(momentum_);
  for (const ParamGrad& p : pg) {
    float* w = p.param->f();
    const std::int64_t n = p.param->numel();
    if (momentum_ > 0) {
      auto [it, fresh] = buf_.try_emplace(p.name, p.param->shape());
      float* b = it->second.f();
      for (std::int64_t i = 0; i < n; ++i) {
        b[i] = fresh ? p.grad[i] : m * b[i] + p.grad[i];
        w[i] -= lrf * b[i];
      }
    } else {
      for (std::int64_t i = 0; i < n; ++i) w[i] -= lrf * p.grad[i];
    }
  }
}

std::map<std::string, Tensor> Sgd::state() const {
  std::map<std::string, Tensor> s;
  for (auto& [k, t] : buf_) s.emplace("momentum." + k, t);
  return s;
}

void Sgd::load_state(const std::map<std::string, Tensor>& s, std::int64_t steps) {
  buf_.clear();
  for (auto& [k, t] : s)
    if (k.rfind("momentum.", 0) == 0) buf_.emplace(k.substr(9), t);
  t_ = steps;
}

void AdamW::step(std::span<const ParamGrad> pg, double lr) {
  ++t_;
  const float b1 = float(o_.beta1), b2 = float(o_.beta2);
  const float bc1 = float(1.0 - std::pow(o_.beta1, double(t_)));
  const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(o_.beta2, double(t_))));
  const float step_size = float(lr) / bc1;
  const float eps = float(o_.eps);
  const float decay = float(1.0 - lr * o_.weight_decay);
  for (const ParamGrad& p : pg) {
    float* w = p.param->f();
    const std::int64_t n = p.param->numel();
    float* m = m_.try_emplace(p.name, p.param->shape()).first->second.f();
    float* v = v_.try_emplace(p.name, p.param->shape()).first->second.f();
    const bool decays = p.param->shape().size() >= 2;
    const float* g = p.grad;
    parallel_for(n, 4096, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        if (decays) w[i] *= decay;
        m[i] = b1 * m[i] + (1.f - b1) * g[i];
        v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
        const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
        w[i] -= step_size * m[i] / denom;
      }
    });
  }
}

std::map<std::string, Tensor> AdamW::state() const {
  std::map<std::string, Tensor> s;
  for (auto& [k, t] : m_) s.emplace("adam_m." + k, t);
  for (auto& [k, t] : v_) s.emplace("adam_v." + k, t);
  return s;
}

void AdamW::load_state(const std::map<std::string, Tensor>& s, std::int64_t steps) {
  m_.clear();
  v_.clear();
  for (auto& [k, t] : s) {
    if (k.rfind("adam_m.", 0) == 0) m_.emplace(k.substr(7), t);
    if (k.rfind("adam_v.", 0) == 0) v_.emplace(k.substr(7), t);
  }
  t_ = steps;
}

double cosine_lr(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max, double lr_min) {
  if (warmup > 0 && step < warmup) return lr_max * double(step + 1) / double(warmup);
  if (step >= total) return lr_min;
  const double t = double(step - warmup) / double(std::max<std::int64_t>(1, total - warmup));
  return lr_min + 0.5 * (1.0 + std::cos(std::numbers::pi * t)) * (lr_max - lr_min);
}

}  // namespace gg
