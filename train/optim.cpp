// SGD, AdamW, clipping and the learning-rate schedule: element by element, in the order
// PyTorch evaluates them (so results match to rounding). Each is one parallel pass over all
// parameters at once, cut into fixed chunks (grad_chunk values), so small parameters do not
// each pay for a pass of their own and the norm's summation order never depends on threads.
#include "train/optim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "io/message.h"
#include "ops/cpu/threads.h"

namespace gg {

namespace {
// Every gradient has its parameter's number of elements.
void check_grad_sizes(const char* who, std::span<const ParamGrad> pg) {
  for (const ParamGrad& p : pg) {
    if (!p.param) throw GraphError(fmt::format("{}: parameter '{}' has no tensor", who, p.name));
    if (std::int64_t(p.grad.size()) != p.param->numel())
      throw GraphError(fmt::format("{}: the gradient of parameter '{}' has {} values, the parameter {} has {}", who,
                                   p.name, p.grad.size(), to_string(p.param->shape()), p.param->numel()));
  }
}
// The optimizer kind whose state keys start with `prefix`.
const char* kind_of_prefix(const std::string& prefix) {
  if (prefix == "adam_m" || prefix == "adam_v") return "adamw";
  if (prefix == "momentum") return "sgd";
  return nullptr;
}

// One chunk of a pass over all parameters: values [begin, end) of parameter pg[param].
struct Chunk {
  std::size_t param;
  std::int64_t begin, end;
};
// The parameters cut into chunks of at most grad_chunk values, in parameter order.
std::vector<Chunk> chunks_of(std::span<const ParamGrad> pg) {
  std::vector<Chunk> cs;
  for (std::size_t p = 0; p < pg.size(); ++p)
    for (std::int64_t b = 0, n = pg[p].param->numel(); b < n; b += grad_chunk)
      cs.push_back({p, b, std::min(n, b + grad_chunk)});
  return cs;
}
// Calls body(index, chunk) once for every chunk, chunks spread over the threads.
template <class Body>
void for_each_chunk(const std::vector<Chunk>& cs, const Body& body) {
  parallel_for(std::int64_t(cs.size()), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t c = b; c < e; ++c) body(std::size_t(c), cs[std::size_t(c)]);
  });
}
// Sum of g[i]^2 over [0, n) in double: eight running sums (lane i % 8, vectorizable), added
// pairwise at the end. A fixed order: the same values give the same bits.
double sum_squares(const float* g, std::int64_t n) {
  double acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += double(g[i + k]) * double(g[i + k]);
  for (int k = 0; i < n; ++i, ++k) acc[k] += double(g[i]) * double(g[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
}  // namespace

ParamShapes param_shapes(const ParamStore& store) {
  ParamShapes r;
  for (auto& [name, t] : store.all()) r.emplace(name, t.shape());
  return r;
}
ParamShapes param_shapes(std::span<const ParamGrad> pg) {
  ParamShapes r;
  for (const ParamGrad& p : pg) r.emplace(p.name, p.param->shape());
  return r;
}

void Optimizer::check_sizes(std::span<const ParamGrad> pg,
                            const std::vector<const std::map<std::string, Tensor>*>& bufs) const {
  check_grad_sizes(kind(), pg);
  const std::vector<std::string> prefixes = buffer_prefixes();
  for (const ParamGrad& p : pg)
    for (std::size_t b = 0; b < bufs.size(); ++b) {
      auto it = bufs[b]->find(p.name);
      if (it != bufs[b]->end() && it->second.shape() != p.param->shape())
        throw GraphError(fmt::format("{}: state '{}.{}' is {} but parameter '{}' is {}", kind(), prefixes[b], p.name,
                                     to_string(it->second.shape()), p.name, to_string(p.param->shape())));
    }
}

void Optimizer::load_state(const std::map<std::string, Tensor>& s, std::int64_t steps, const ParamShapes& params) {
  if (steps < 0) throw GraphError(fmt::format("{}: load_state with steps {} (must be >= 0)", kind(), steps));
  const std::vector<std::string> prefixes = buffer_prefixes();
  for (auto& [key, t] : s) {
    const auto dot = key.find('.');
    const std::string prefix = key.substr(0, dot), name = dot == std::string::npos ? "" : key.substr(dot + 1);
    if (std::find(prefixes.begin(), prefixes.end(), prefix) == prefixes.end()) {
      const char* other = kind_of_prefix(prefix);
      if (other && std::string(other) != kind())
        throw GraphError(fmt::format("{}: state key {} is {} optimizer state, not {}", kind(), io::in_quotes(key, 60),
                                     other, kind()));
      throw GraphError(fmt::format("{}: unexpected state key {}{}", kind(), io::in_quotes(key, 60),
                                   prefixes.empty() ? " (this optimizer keeps no buffers)" : ""));
    }
    auto p = params.find(name);
    if (p == params.end())
      throw GraphError(fmt::format("{}: state key {} is for a parameter not among the {} parameters", kind(),
                                   io::in_quotes(key, 60), params.size()));
    if (t.shape() != p->second || t.dtype() != DType::f32)
      throw GraphError(fmt::format("{}: state {} is {}{} but its parameter is f32{}", kind(), io::in_quotes(key, 60),
                                   to_string(t.dtype()), io::cut(to_string(t.shape()), 40),
                                   io::cut(to_string(p->second), 40)));
  }
  // After a step every parameter has every buffer.
  if (steps > 0)
    for (auto& [name, shape] : params)
      for (const std::string& prefix : prefixes)
        if (!s.count(prefix + "." + name))
          throw GraphError(fmt::format("{}: state at step {} is missing {} for parameter {} (is it another "
                                       "optimizer's state?)", kind(), steps, io::in_quotes(prefix + "." + name, 60),
                                       io::cut(to_string(shape), 40)));
  set_buffers(s);
  t_ = steps;
}

double grad_norm(std::span<const ParamGrad> pg) {
  check_grad_sizes("grad_norm", pg);
  const std::vector<Chunk> cs = chunks_of(pg);
  std::vector<double> partial(cs.size());  // per chunk, then added in chunk order
  for_each_chunk(cs, [&](std::size_t c, const Chunk& k) {
    partial[c] = sum_squares(pg[k.param].grad.data() + k.begin, k.end - k.begin);
  });
  double ss = 0;
  for (double s : partial) ss += s;
  return std::sqrt(ss);
}

float clip_scale(double norm, double max_norm) {
  return max_norm > 0 ? float(std::min(1.0, max_norm / (norm + 1e-6))) : 1.f;
}

double clip_grad_norm(std::span<const ParamGrad> pg, double max_norm) {
  check_grad_sizes("clip_grad_norm", pg);
  const double norm = grad_norm(pg);
  const float scale = clip_scale(norm, max_norm);
  if (scale < 1.f)
    for_each_chunk(chunks_of(pg), [&](std::size_t, const Chunk& k) {
      float* g = pg[k.param].grad.data();
      for (std::int64_t i = k.begin; i < k.end; ++i) g[i] *= scale;
    });
  return norm;
}

void Sgd::step(std::span<const ParamGrad> pg, double lr, float grad_scale) {
  check_sizes(pg, {&buf_});
  ++t_;
  const float m = float(momentum_);
  std::vector<float> lrs(pg.size());  // per parameter: its group's learning rate
  for (std::size_t p = 0; p < pg.size(); ++p) lrs[p] = float(lr * setting(pg[p].name).lr_scale);
  // Buffers are made here, before the parallel pass; fresh: this step is the buffer's first.
  std::vector<float*> buf(pg.size(), nullptr);
  std::vector<char> fresh(pg.size(), 0);
  if (momentum_ > 0)
    for (std::size_t p = 0; p < pg.size(); ++p) {
      auto [it, made] = buf_.try_emplace(pg[p].name, pg[p].param->shape());
      buf[p] = it->second.f();
      fresh[p] = made;
    }
  for_each_chunk(chunks_of(pg), [&](std::size_t, const Chunk& k) {
    float* w = pg[k.param].param->f();
    const float* g = pg[k.param].grad.data();
    const float lrf = lrs[k.param];
    if (float* b = buf[k.param]) {
      for (std::int64_t i = k.begin; i < k.end; ++i) {
        const float gi = g[i] * grad_scale;
        b[i] = fresh[k.param] ? gi : m * b[i] + gi;
        w[i] -= lrf * b[i];
      }
    } else {
      for (std::int64_t i = k.begin; i < k.end; ++i) w[i] -= lrf * (g[i] * grad_scale);
    }
  });
}

std::map<std::string, Tensor> Sgd::state() const {
  std::map<std::string, Tensor> s;
  for (auto& [k, t] : buf_) s.emplace("momentum." + k, t);
  return s;
}

std::vector<std::string> Sgd::buffer_prefixes() const {
  if (momentum_ > 0) return {"momentum"};
  return {};
}

void Sgd::set_buffers(const std::map<std::string, Tensor>& s) {
  buf_.clear();
  for (auto& [k, t] : s) buf_.emplace(k.substr(9), t);  // "momentum.<name>"
}

void AdamW::step(std::span<const ParamGrad> pg, double lr, float grad_scale) {
  check_sizes(pg, {&m_, &v_});
  ++t_;
  const float b1 = float(o_.beta1), b2 = float(o_.beta2);
  const float bc1 = float(1.0 - std::pow(o_.beta1, double(t_)));
  const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(o_.beta2, double(t_))));
  const float eps = float(o_.eps);
  // The moment buffers are made here, before the parallel pass; so are each parameter's
  // step size and decay factor (its group's learning rate and weight decay).
  std::vector<float*> ms(pg.size()), vs(pg.size());
  std::vector<float> step_sizes(pg.size()), decays(pg.size());
  for (std::size_t p = 0; p < pg.size(); ++p) {
    ms[p] = m_.try_emplace(pg[p].name, pg[p].param->shape()).first->second.f();
    vs[p] = v_.try_emplace(pg[p].name, pg[p].param->shape()).first->second.f();
    const ParamSetting set = setting(pg[p].name);
    const double lr_p = lr * set.lr_scale;
    step_sizes[p] = float(lr_p) / bc1;
    decays[p] = float(1.0 - lr_p * (set.weight_decay >= 0 ? set.weight_decay : o_.weight_decay));
  }
  for_each_chunk(chunks_of(pg), [&](std::size_t, const Chunk& k) {
    float* w = pg[k.param].param->f();
    float* m = ms[k.param];
    float* v = vs[k.param];
    const float* g = pg[k.param].grad.data();
    // Decay first, in a pass of its own over the chunk (still in cache for the next loop): a
    // separate product, rounded, as PyTorch applies it, and not fused by the compiler into
    // the update's subtraction. The constants are copied into locals: through the lambda's
    // references, every store to w, m or v could change them, and no loop would vectorize.
    const float gs = grad_scale, c1 = b1, c2 = b2, bc = bc2_sqrt, e = eps, lr_t = step_sizes[k.param],
                d = decays[k.param];
    if (pg[k.param].param->shape().size() >= 2)
      for (std::int64_t i = k.begin; i < k.end; ++i) w[i] *= d;
    for (std::int64_t i = k.begin; i < k.end; ++i) {
      const float gi = g[i] * gs;  // == the clipped gradient (x * 1.f == x)
      m[i] = c1 * m[i] + (1.f - c1) * gi;
      v[i] = c2 * v[i] + (1.f - c2) * gi * gi;
      const float denom = std::sqrt(v[i]) / bc + e;
      w[i] -= lr_t * m[i] / denom;
    }
  });
}

std::map<std::string, Tensor> AdamW::state() const {
  std::map<std::string, Tensor> s;
  for (auto& [k, t] : m_) s.emplace("adam_m." + k, t);
  for (auto& [k, t] : v_) s.emplace("adam_v." + k, t);
  return s;
}

void AdamW::set_buffers(const std::map<std::string, Tensor>& s) {
  m_.clear();
  v_.clear();
  for (auto& [k, t] : s) {
    if (k.rfind("adam_m.", 0) == 0) m_.emplace(k.substr(7), t);
    if (k.rfind("adam_v.", 0) == 0) v_.emplace(k.substr(7), t);
  }
}

Optimizer::ParamSetting Optimizer::setting(const std::string& name) const {
  auto it = settings_.find(name);
  return it == settings_.end() ? ParamSetting{} : it->second;
}

double linear_lr(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max, double lr_min) {
  if (warmup > 0 && step < warmup) return lr_max * double(step + 1) / double(warmup);
  if (step >= total) return lr_min;
  const double t = double(step - warmup) / double(std::max<std::int64_t>(1, total - warmup));
  return lr_max + t * (lr_min - lr_max);
}

double constant_lr(std::int64_t step, std::int64_t warmup, double lr_max) {
  return warmup > 0 && step < warmup ? lr_max * double(step + 1) / double(warmup) : lr_max;
}

double cosine_lr(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max, double lr_min) {
  if (warmup > 0 && step < warmup) return lr_max * double(step + 1) / double(warmup);
  if (step >= total) return lr_min;
  const double t = double(step - warmup) / double(std::max<std::int64_t>(1, total - warmup));
  return lr_min + 0.5 * (1.0 + std::cos(std::numbers::pi * t)) * (lr_max - lr_min);
}

}  // namespace gg
