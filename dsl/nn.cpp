// The compositions of dsl/nn.h, each a few lines of primitives with shape comments.
#include "dsl/nn.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "ops/ir/op_rule.h"
#include "ops/runtime/config.h"

namespace gg::dsl {

Expr linear(Expr x, std::int64_t out_features, const std::string& name, bool bias, std::optional<Init> w_init,
            Loc loc) {
  Graph& g = graph_of("linear", loc, {x});
  UserSite site(g, loc);
  Scope scope(g, name);
  const std::int64_t in = x.dim(-1);
  Expr w = param(g, "weight", {out_features, in}, w_init.value_or(normal_init(0.02f)), loc);  // w: (out, in)
  Expr y = matmul(x, w, false, true, loc);                                                    // y: (..., out)
  if (bias) y = y + param(g, "bias", {out_features}, zeros_init(), loc);
  return y;
}

Expr softmax(Expr x, std::int64_t axis, Loc loc) {
  UserSite site(graph_of("softmax", loc, {x}), loc);
  // The shift by the row max is for range only (softmax is shift-invariant), so no
  // gradient flows through it: the reverse pass builds nothing for the max.
  Expr e = exp(x - stop_gradient(max(x, axis, true)));  // e: like x, largest entry of each row is 1
  return e / sum(e, axis, true);
}

Expr log_softmax(Expr x, std::int64_t axis, Loc loc) {
  UserSite site(graph_of("log_softmax", loc, {x}), loc);
  Expr shifted = x - stop_gradient(max(x, axis, true));  // shift-invariant, as in softmax
  return shifted - log(sum(exp(shifted), axis, true));
}

Expr layer_norm(Expr x, const std::string& name, float eps, bool bias, Loc loc) {
  Graph& g = graph_of("layer_norm", loc, {x});
  UserSite site(g, loc);
  Scope scope(g, name);
  const std::int64_t D = x.dim(-1);
  Expr xc = x - mean(x, -1, true);                       // xc: (..., D)
  Expr var = mean(xc * xc, -1, true);                    // var: (..., 1)
  Expr y = xc / sqrt(var + eps);                         // y: (..., D)
  y = y * param(g, "weight", {D}, ones_init(), loc);
  if (bias) y = y + param(g, "bias", {D}, zeros_init(), loc);
  return y;
}

Expr rms_norm(Expr x, const std::string& name, float eps, Loc loc) {
  Graph& g = graph_of("rms_norm", loc, {x});
  UserSite site(g, loc);
  Scope scope(g, name);
  const std::int64_t D = x.dim(-1);
  Expr y = x / sqrt(mean(x * x, -1, true) + eps);  // y: (..., D)
  return y * param(g, "weight", {D}, ones_init(), loc);
}

Expr gelu(Expr x, GeluKind kind, Loc loc) {
  UserSite site(graph_of("gelu", loc, {x}), loc);
  if (kind == GeluKind::erf) return 0.5f * (x * (1.f + erf(x * float(1.0 / std::numbers::sqrt2))));
  const float c = float(std::sqrt(2.0 / std::numbers::pi));
  Expr inner = c * (x + 0.044715f * (x * x * x));
  return 0.5f * (x * (1.f + tanh(inner)));
}

Expr silu(Expr x, Loc loc) {
  UserSite site(graph_of("silu", loc, {x}), loc);
  return x * sigmoid(x);
}

Expr cross_entropy(Expr logits, Expr targets, int ignore_index, Loc loc) {
  Graph& g = graph_of("cross_entropy", loc, {logits, targets});
  UserSite site(g, loc);
  NameScope scope(g, "cross_entropy");
  const std::int64_t V = logits.dim(-1);
  Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.dtype() != DType::i32 || targets.shape() != lead)
    fail_at_call(g, "cross_entropy", loc, fmt::format("targets must be i32 {} to match logits {}, got {} {}",
                                                      to_string(lead), to_string(logits.shape()),
                                                      to_string(targets.dtype()), to_string(targets.shape())));
  std::vector<float> iota(static_cast<std::size_t>(V));
  for (std::int64_t i = 0; i < V; ++i) iota[std::size_t(i)] = float(i);
  Expr classes = constant(g, iota, {V}, DType::i32, loc);                   // classes: (V)
  Shape tshape = lead;
  tshape.push_back(1);
  Expr column = reshape(targets, tshape, loc);                               // column: (..., 1) i32
  Expr onehot = compare(column, classes, Cmp::eq, loc);                     // onehot: (..., V), 0 rows when ignored
  Expr picked = sum(onehot * log_softmax(logits), -1);                      // picked: (...)
  Expr valid = compare(targets, constant(g, {float(ignore_index)}, {}, DType::i32, loc), Cmp::ne, loc);  // valid: (...)
  // At run time, a batch without a single counted position would give 0 / 0 = NaN.
  const std::string context = fmt::format("cross_entropy at {} (targets '{}')", site_string(g.user_loc().value_or(loc)),
                                          targets.name());
  g.add_check(column.id, context, [ignore_index, V](const View& v) -> std::string {
    for (std::int64_t i = 0, n = v.numel(); i < n; ++i)
      if (const std::int32_t t = v.i()[i]; t != ignore_index && (t < 0 || t >= V))
        return fmt::format("target {} at position {} is outside [0, {}) and not the ignore index {}", t, i, V,
                           ignore_index);
    return {};
  });
  g.add_check(valid.id, context, [ignore_index](const View& v) -> std::string {
    for (std::int64_t i = 0, n = v.numel(); i < n; ++i)
      if (v.f()[i] != 0.f) return {};
    return fmt::format("every value is the ignore index {}: no position to average the loss over", ignore_index);
  });
  return -(sum_all(picked) / sum_all(valid));
}

Expr embedding(Expr index, std::int64_t num, std::int64_t dim, const std::string& name, Loc loc) {
  Graph& g = graph_of("embedding", loc, {index});
  UserSite site(g, loc);
  Scope scope(g, name);
  Expr w = param(g, "weight", {num, dim}, normal_init(0.02f), loc);  // w: (num, dim)
  return gather(w, index, 0, loc);                                   // (..., dim)
}

Expr positional_encoding(Graph& g, std::int64_t max_len, std::int64_t d_model, Loc loc) {
  UserSite site(g, loc);
  if (max_len < 1 || d_model < 1)
    fail_at_call(g, "positional_encoding", loc, fmt::format("max_len {} and d_model {} must be >= 1", max_len, d_model));
  std::vector<float> p(static_cast<std::size_t>(max_len * d_model));
  for (std::int64_t pos = 0; pos < max_len; ++pos)
    for (std::int64_t i = 0; i < d_model; ++i) {
      const std::int64_t k2 = i - (i % 2);  // 2k
      const double w = std::exp(-double(k2) * std::log(10000.0) / double(d_model));
      p[std::size_t(pos * d_model + i)] = float(i % 2 == 0 ? std::sin(double(pos) * w) : std::cos(double(pos) * w));
    }
  NameScope scope(g, "positional_encoding");
  return constant(g, std::move(p), {max_len, d_model}, DType::f32, loc);
}

Expr patches(Expr images, std::int64_t p, Loc loc) {
  Graph& g = graph_of("patches", loc, {images});
  UserSite site(g, loc);
  if (images.rank() == 3) images = reshape(images, {images.dim(0), 1, images.dim(1), images.dim(2)}, loc);
  if (images.rank() != 4)
    fail_at_call(g, "patches", loc, fmt::format("images must be (B, H, W) or (B, C, H, W), got {}", to_string(images.shape())));
  const std::int64_t B = images.dim(0), C = images.dim(1), H = images.dim(2), W = images.dim(3);
  if (p < 1 || H % p != 0 || W % p != 0)
    fail_at_call(g, "patches", loc, fmt::format("patch size {} does not divide the image size {}x{} of {}", p, H, W,
                                                to_string(images.shape())));
  Expr x = reshape(images, {B, C, H / p, p, W / p, p}, loc);      // x: (B, C, H/p, p, W/p, p)
  x = permute(x, {0, 2, 4, 1, 3, 5}, loc);                         // x: (B, H/p, W/p, C, p, p)
  return reshape(x, {B, (H / p) * (W / p), C * p * p}, loc);       // (B, N, C p p)
}

Expr patch_embedding(Expr images, std::int64_t p, std::int64_t d_model, const std::string& name, bool bias,
                     std::optional<Init> w_init, Loc loc) {
  UserSite site(graph_of("patch_embedding", loc, {images}), loc);
  return linear(patches(images, p, loc), d_model, name, bias, w_init, loc);
}

Expr causal_mask(Graph& g, std::int64_t T, Loc loc) {
  UserSite site(g, loc);
  if (T < 1) fail_at_call(g, "causal_mask", loc, fmt::format("length T = {} must be >= 1", T));
  std::vector<float> m(static_cast<std::size_t>(T * T));
  for (std::int64_t q = 0; q < T; ++q)
    for (std::int64_t k = 0; k < T; ++k) m[std::size_t(q * T + k)] = k <= q ? 1.f : 0.f;
  NameScope scope(g, "causal_mask");
  return constant(g, std::move(m), {T, T}, DType::f32, loc);
}

Expr padding_mask(Expr keep, Loc loc) {
  Graph& g = graph_of("padding_mask", loc, {keep});
  UserSite site(g, loc);
  if (keep.rank() != 2)
    fail_at_call(g, "padding_mask", loc, fmt::format("wants keep (B, Tk), got {}", to_string(keep.shape())));
  if (keep.dtype() == DType::i32)  // token validity 0/1 -> f32
    keep = compare(keep, constant(g, {0.f}, {}, DType::i32, loc), Cmp::ne, loc);  // keep: (B, Tk) f32
  return reshape(keep, {keep.dim(0), 1, keep.dim(1)}, loc);                       // (B, 1, Tk)
}

Expr padding_mask_from_ids(Expr ids, std::int64_t pad_id, Loc loc) {
  Graph& g = graph_of("padding_mask_from_ids", loc, {ids});
  UserSite site(g, loc);
  if (ids.rank() != 2 || ids.dtype() != DType::i32)
    fail_at_call(g, "padding_mask_from_ids", loc,
                 fmt::format("wants i32 token ids (B, Tk), got {} {} ('{}')", to_string(ids.dtype()),
                             to_string(ids.shape()), ids.name()));
  Expr keep = compare(ids, constant(g, {float(pad_id)}, {}, DType::i32, loc), Cmp::ne, loc);  // keep: (B, Tk) f32
  return reshape(keep, {ids.dim(0), 1, ids.dim(1)}, loc);                                     // (B, 1, Tk)
}

namespace {
// masked_fill's mask as it lines up with the scores: the rule of dsl/nn.h checked (a
// GraphError naming both shapes), reshaped to the scores' rank where it differs, and from
// i32 made f32 (1 where nonzero).
Expr aligned_mask(Graph& g, Expr scores, Expr mask, Loc loc) {
  const Shape& ss = scores.shape();
  const Shape& ms = mask.shape();
  const int sr = int(ss.size()), mr = int(ms.size());
  auto fail = [&](const std::string& why) {
    fail_at_call(g, "masked_fill", loc, fmt::format("mask {} ('{}') does not fit scores {} ('{}'): {}", to_string(ms),
                                                    mask.name(), to_string(ss), scores.name(), why));
  };
  if (sr < 2 || sr > 4) fail("scores must be (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk)");
  if (mr < 2 || mr > sr)
    fail(fmt::format("a mask is (Tq, Tk), (B, 1, Tk), (B, Tq, Tk){}", sr == 4 ? " or (B, 1|H, Tq, Tk)" : ""));
  // The mask's dims as they line up with the scores': (Tq, Tk) -> every batch (and head);
  // (B, Tq, Tk) -> per batch, a head axis inserted for 4-D scores; 4-D -> as is.
  Shape aligned(std::size_t(sr), 1);
  for (int d = 0; d < 2; ++d) aligned[std::size_t(sr - 2 + d)] = ms[std::size_t(mr - 2 + d)];
  if (mr >= 3) aligned[0] = ms[0];
  if (mr == 4) aligned[1] = ms[1];
  const char* names4[] = {"B", "H", "Tq", "Tk"};
  const char* names3[] = {"B", "Tq", "Tk"};
  const char* names2[] = {"Tq", "Tk"};
  const char** names = sr == 4 ? names4 : sr == 3 ? names3 : names2;
  for (int d = 0; d < sr; ++d) {
    const std::int64_t m = aligned[std::size_t(d)], s = ss[std::size_t(d)];
    if (m == 1 || m == s) continue;
    // A 3-D mask whose first dim is the number of heads lines up under plain broadcasting
    // as (H, Tq, Tk), but a 3-D mask is per batch: refuse it rather than guess.
    if (mr == 3 && sr == 4 && d == 0 && ms[0] == ss[1])
      fail(fmt::format("a 3-D mask is read per batch as (B, Tq, Tk) with B = {}, but its first dim {} is the number of "
                       "heads; for a per-head mask pass (1, H, Tq, Tk), for a per-batch one (B, Tq, Tk)",
                       ss[0], ms[0]));
    fail(fmt::format("{} is {} in the mask but {} in the scores (masks are (Tq, Tk), (B, 1, Tk), (B, Tq, Tk) or "
                     "(B, 1|H, Tq, Tk), applied per batch)", names[d], m, s));
  }
  if (aligned != ms) mask = reshape(mask, aligned, loc);  // mask: (B|1, 1, Tq|1, Tk|1) for 4-D scores
  if (mask.dtype() == DType::i32) mask = compare(mask, constant(g, {0.f}, {}, DType::i32, loc), Cmp::ne, loc);
  return mask;
}

// scores where the aligned mask is nonzero, -inf where it is 0.
Expr fill_masked(Graph& g, Expr scores, Expr aligned, Loc loc) {
  Expr ninf = scalar(g, -std::numeric_limits<float>::infinity(), loc);
  return where(aligned, scores, ninf, loc);
}
}  // namespace

Expr masked_fill(Expr scores, Expr mask, Loc loc) {
  Graph& g = graph_of("masked_fill", loc, {scores, mask});
  UserSite site(g, loc);
  return fill_masked(g, scores, aligned_mask(g, scores, mask, loc), loc);
}

Expr dropout(Expr x, float p, bool training, Loc loc) {
  if (!training || p <= 0.f) return x;
  Graph& g = graph_of("dropout", loc, {x});
  UserSite site(g, loc);
  NameScope scope(g, "dropout");
  if (p >= 1.f) fail_at_call(g, "dropout", loc, fmt::format("probability {} must be < 1", p));
  Expr keep = compare(Expr{&g, op::random(g, x.shape(), loc)}, scalar(g, p), Cmp::ge, loc);  // keep: like x, 1 w.p. 1-p
  return x * keep * (1.f / (1.f - p));
}

Expr random_uniform(Graph& g, Shape shape, float lo, float hi, Loc loc) {
  UserSite site(g, loc);
  NameScope scope(g, "random_uniform");
  if (!(lo < hi)) fail_at_call(g, "random_uniform", loc, fmt::format("needs lo < hi, got lo {} and hi {}", lo, hi));
  Expr u{&g, op::random(g, std::move(shape), loc)};  // u: uniform in [0, 1)
  return u * (hi - lo) + lo;
}

Expr random_normal(Graph& g, Shape shape, Loc loc) {
  UserSite site(g, loc);
  NameScope scope(g, "random_normal");
  Expr u1{&g, op::random(g, shape, loc)};             // u1, u2: uniform in [0, 1), independent
  Expr u2{&g, op::random(g, std::move(shape), loc)};
  Expr radius = sqrt(log(1.f - u1) * -2.f);           // 1 - u1 in (0, 1]: a finite log
  return radius * cos(u2 * float(2 * std::numbers::pi));
}

AttentionResult attention(Expr q, Expr k, Expr v, const AttentionOptions& opt, Loc loc) {
  Graph& g = graph_of("attention", loc, {q, k, v});
  if (opt.mask) graph_of("attention", loc, {q, *opt.mask});
  UserSite site(g, loc);
  const std::int64_t hs = q.dim(-1);
  const float scale = opt.scale ? float(1.0 / std::sqrt(double(hs))) : 1.f;
  // The composition, built first so that a shape mistake is reported by its primitives in
  // the user's words; with the fused path its nodes are dead unless the weights are read.
  Expr scores = matmul(q, k, false, true, loc);                          // scores: (..., Tq, Tk)
  if (opt.scale) scores = scores * scale;
  std::optional<Expr> mask;
  if (opt.mask) {
    mask = aligned_mask(g, scores, *opt.mask, loc);                      // mask: f32, of the scores' rank
    scores = fill_masked(g, scores, *mask, loc);
  }
  Expr weights = softmax(scores, -1, loc);                               // weights: (..., Tq, Tk)
  const bool dropping = opt.training && opt.dropout > 0.f;
  const bool same_batch = q.rank() == k.rank() && q.rank() == v.rank() &&
                          std::equal(q.shape().begin(), q.shape().end() - 2, k.shape().begin()) &&
                          std::equal(q.shape().begin(), q.shape().end() - 2, v.shape().begin());
  const std::optional<bool> chosen = opt.fused ? opt.fused : g.fused_attention() ? g.fused_attention() : env_config().fused_attention;
  const bool fused = chosen.value_or(k.dim(-2) > fused_attention_keys);
  if (!fused || dropping || !same_batch) {
    Expr out = matmul(dropout(weights, opt.dropout, opt.training, loc), v, false, false, loc);  // out: (..., Tq, hv)
    return {out, weights};
  }
  // The fused pair (ops/primitives/attention.cpp): out and each row's log-sum-exp, (..., Tq, hv + 1).
  Expr both{&g, op::attention(g, q.id, k.id, v.id, mask ? mask->id : -1, scale, loc)};
  Expr out = slice(both, -1, 0, v.dim(-1), loc);                          // out: (..., Tq, hv)
  return {out, weights};
}

AttentionResult single_head_attention(Expr x, std::int64_t d_k, const std::string& name, const AttentionOptions& opt,
                                      bool out_proj, Loc loc) {
  Graph& g = graph_of("single_head_attention", loc, {x});
  UserSite site(g, loc);
  Scope scope(g, name);
  const std::int64_t D = x.dim(-1);
  const Init init = normal_init(float(1.0 / std::sqrt(double(D))));
  Expr q = matmul(x, param(g, "W_Q", {D, d_k}, init, loc), false, false, loc);  // q: (B, T, d_k)
  Expr k = matmul(x, param(g, "W_K", {D, d_k}, init, loc), false, false, loc);  // k: (B, T, d_k)
  Expr v = matmul(x, param(g, "W_V", {D, d_k}, init, loc), false, false, loc);  // v: (B, T, d_k)
  AttentionResult r = attention(q, k, v, opt, loc);
  if (out_proj) r.out = matmul(r.out, param(g, "W_O", {d_k, D}, init, loc), false, false, loc);  // (B, T, D)
  return r;
}

Expr split_heads(Expr x, std::int64_t n_head, Loc loc) {
  UserSite site(*x.g, loc);
  if (x.rank() != 3 || n_head <= 0 || x.dim(2) % n_head != 0)
    fail_at_call(*x.g, "split_heads", loc, fmt::format("wants (B, T, D) with D divisible by n_head {}, got {}", n_head,
                                                       to_string(x.shape())));
  const std::int64_t B = x.dim(0), T = x.dim(1), hs = x.dim(2) / n_head;
  return permute(reshape(x, {B, T, n_head, hs}, loc), {0, 2, 1, 3}, loc);  // (B, H, T, hs)
}

Expr merge_heads(Expr x, Loc loc) {
  UserSite site(*x.g, loc);
  if (x.rank() != 4) fail_at_call(*x.g, "merge_heads", loc, fmt::format("wants (B, H, T, hs), got {}", to_string(x.shape())));
  const std::int64_t B = x.dim(0), H = x.dim(1), T = x.dim(2), hs = x.dim(3);
  return reshape(permute(x, {0, 2, 1, 3}, loc), {B, T, H * hs}, loc);  // (B, T, H hs)
}

AttentionResult multi_head_attention(Expr x, std::int64_t n_head, const std::string& name, bool bias,
                                     const AttentionOptions& opt, std::optional<Init> proj_init, Loc loc) {
  Graph& g = graph_of("multi_head_attention", loc, {x});
  UserSite site(g, loc);
  Scope scope(g, name);
  if (x.rank() != 3)
    fail_at_call(g, "multi_head_attention", loc, fmt::format("wants x (B, T, D), got {} ('{}')", to_string(x.shape()), x.name()));
  const std::int64_t D = x.dim(-1);
  if (n_head <= 0 || D % n_head != 0)
    fail_at_call(g, "multi_head_attention", loc, fmt::format("n_embd {} is not divisible by n_head {}", D, n_head));
  Expr q = split_heads(linear(x, D, "query", bias, {}, loc), n_head, loc);  // q: (B, H, T, hs)
  Expr k = split_heads(linear(x, D, "key", bias, {}, loc), n_head, loc);    // k: (B, H, T, hs)
  Expr v = split_heads(linear(x, D, "value", bias, {}, loc), n_head, loc);  // v: (B, H, T, hs)
  AttentionResult r = attention(q, k, v, opt, loc);                         // r.out: (B, H, T, hs)
  r.out = linear(merge_heads(r.out, loc), D, "proj", bias, proj_init, loc);  // (B, T, D)
  return r;
}

Expr rotary_embedding(Expr x, std::int64_t start, float base, Loc loc) {
  Graph& g = graph_of("rotary_embedding", loc, {x});
  UserSite site(g, loc);
  if (x.rank() < 2)
    fail_at_call(g, "rotary_embedding", loc, fmt::format("wants x (..., T, hs), got {} ('{}')", to_string(x.shape()), x.name()));
  const std::int64_t T = x.dim(-2), hs = x.dim(-1), half = hs / 2, last = x.rank() - 1;
  if (hs % 2 != 0)
    fail_at_call(g, "rotary_embedding", loc, fmt::format("the head size {} of '{}' {} is odd (pairs of features rotate)",
                                                         hs, x.name(), to_string(x.shape())));
  if (start < 0 || !(base > 1.f))
    fail_at_call(g, "rotary_embedding", loc, fmt::format("wants start >= 0 and base > 1, got start {}, base {}", start, base));
  std::vector<float> cos_t(std::size_t(T * hs)), sin_t(std::size_t(T * hs));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < hs; ++i) {
      const double angle = double(start + t) * std::pow(double(base), -2.0 * double(i % half) / double(hs));
      cos_t[std::size_t(t * hs + i)] = float(std::cos(angle));
      sin_t[std::size_t(t * hs + i)] = float(std::sin(angle));
    }
  Expr rotated = concat({-slice(x, last, half, hs, loc), slice(x, last, 0, half, loc)}, last, loc);  // (-x2, x1)
  return x * constant(g, cos_t, {T, hs}, DType::f32, loc) + rotated * constant(g, sin_t, {T, hs}, DType::f32, loc);
}

AttentionResult grouped_query_attention(Expr x, const std::string& name, const GroupedQueryOptions& opt, Loc loc) {
  Graph& g = graph_of("grouped_query_attention", loc, {x});
  UserSite site(g, loc);
  Scope scope(g, name);
  if (x.rank() != 3)
    fail_at_call(g, "grouped_query_attention", loc, fmt::format("wants x (B, T, D), got {} ('{}')", to_string(x.shape()), x.name()));
  const std::int64_t B = x.dim(0), T = x.dim(1), D = x.dim(2), H = opt.n_head, Hkv = opt.n_kv_head;
  if (H <= 0 || D % H != 0)
    fail_at_call(g, "grouped_query_attention", loc, fmt::format("n_embd {} is not divisible by n_head {}", D, H));
  if (Hkv <= 0 || H % Hkv != 0)
    fail_at_call(g, "grouped_query_attention", loc,
                 fmt::format("n_head {} is not a multiple of n_kv_head {} (each key/value head serves a whole group of "
                             "query heads)", H, Hkv));
  const std::int64_t hs = D / H, group = H / Hkv;
  Expr q = split_heads(linear(x, D, "query", opt.bias, {}, loc), H, loc);           // q: (B, H, T, hs)
  Expr k = split_heads(linear(x, Hkv * hs, "key", opt.bias, {}, loc), Hkv, loc);    // k: (B, Hkv, T, hs)
  Expr v = split_heads(linear(x, Hkv * hs, "value", opt.bias, {}, loc), Hkv, loc);  // v: (B, Hkv, T, hs)
  if (opt.rotary) {
    q = rotary_embedding(q, 0, opt.rope_base, loc);
    k = rotary_embedding(k, 0, opt.rope_base, loc);
  }
  if (group > 1) {  // kv head j -> query heads j * group ... (j + 1) * group - 1
    auto repeat = [&](Expr e) {
      return reshape(expand(reshape(e, {B, Hkv, 1, T, hs}, loc), {B, Hkv, group, T, hs}, loc), {B, H, T, hs}, loc);
    };
    k = repeat(k);
    v = repeat(v);
  }
  AttentionResult r = attention(q, k, v, opt.attn, loc);                              // r.out: (B, H, T, hs)
  r.out = linear(merge_heads(r.out, loc), D, "proj", opt.bias, opt.proj_init, loc);  // (B, T, D)
  return r;
}

Expr transformer_block(Expr x, const std::string& name, const BlockOptions& opt, Loc loc) {
  Graph& g = graph_of("transformer_block", loc, {x});
  UserSite site(g, loc);
  Scope scope(g, name);
  const std::int64_t D = x.dim(-1);
  Expr h = layer_norm(x, "norm1", opt.eps, opt.bias, loc);
  x = x + multi_head_attention(h, opt.n_head, "attn", opt.bias, opt.attn, opt.resid_init, loc).out;
  h = layer_norm(x, "norm2", opt.eps, opt.bias, loc);
  Scope mlp(g, "mlp");
  h = gelu(linear(h, 4 * D, "fc1", opt.bias, {}, loc), opt.gelu, loc);  // h: (B, T, 4D)
  return x + linear(h, D, "fc2", opt.bias, opt.resid_init, loc);
}

}  // namespace gg::dsl
