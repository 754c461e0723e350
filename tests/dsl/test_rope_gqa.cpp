// Tests for dsl/nn.h's rms_norm, rotary_embedding and grouped_query_attention: gradient
// checks, what each must do (rows of RMS 1; a rotation that keeps every pair's length and
// makes q . k depend only on the distance between positions; grouped-query attention that
// is multi-head attention when every query head has its own key/value head, and whose
// key/value heads serve whole groups), and errors at the user's line. The PyTorch golden
// is in test_transformer_golden.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dsl/nn.h"
#include "tests/dsl/dsl_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace gg;
using namespace gg::dsl;
using namespace gg::test;

// The message of the GraphError that `f` throws, and the line it was thrown for.
template <class F>
std::string error_of(F&& f) {
  return gg::test::error_of<GraphError>(f);
}

}  // namespace

TEST_CASE("gradcheck: rms_norm, rotary_embedding (from position 0 and from 3) and grouped_query_attention") {
  SUBCASE("rms_norm") {
    Graph g;
    Expr x = input(g, "x", {3, 5});
    Expr y = rms_norm(x, "norm");
    ParamStore ps;
    randomize(g, ps);
    check_grads(g, weighted_sum(y), ps, {{"x", tensor({3, 5}, -1.f, 1.f, 3)}}, {x});
  }
  for (std::int64_t start : {0, 3}) {
    CAPTURE(start);
    Graph g;
    Expr x = input(g, "x", {2, 2, 3, 6});  // (B, H, T, hs)
    Expr y = rotary_embedding(x, start, 100.f);
    ParamStore ps;
    GradcheckResult r = gradcheck(g, weighted_sum(y).id, {x.id}, ps, {{"x", tensor({2, 2, 3, 6}, -1.f, 1.f, 4)}});
    INFO(r.worst);
    CHECK(r.ok);
    CHECK(r.checked > 0);
  }
  for (std::int64_t n_kv : {1, 2, 4}) {
    CAPTURE(n_kv);
    Graph g;
    Expr x = input(g, "x", {2, 3, 8});
    AttentionResult r = grouped_query_attention(
        x, "attn", {.n_head = 4, .n_kv_head = n_kv, .bias = n_kv == 2, .attn = {.mask = causal_mask(g, 3)}});
    CHECK(r.out.shape() == Shape{2, 3, 8});
    CHECK(r.weights.shape() == Shape{2, 4, 3, 3});
    ParamStore ps;
    randomize(g, ps);
    check_grads(g, weighted_sum(r.out), ps, {{"x", tensor({2, 3, 8}, -1.f, 1.f, 5)}}, {x});
  }
}

TEST_CASE("rms_norm: every row has RMS 1 with weight 1, and its weight scales the features") {
  Graph g;
  Expr x = input(g, "x", {4, 6});
  Expr y = rms_norm(x, "norm", 0.f);
  ParamStore ps;
  ps.init_missing(g, 1);
  const Tensor xs = tensor({4, 6}, -3.f, 3.f, 7);
  const std::vector<float> out = run(g, {y}, ps, {{"x", xs}})[0].to_vector();
  CHECK(ps.at("norm.weight").to_vector() == std::vector<float>(6, 1.f));
  for (int r = 0; r < 4; ++r) {
    double ss = 0, xss = 0;
    for (int c = 0; c < 6; ++c) {
      ss += double(out[r * 6 + c]) * out[r * 6 + c];
      xss += double(xs.f()[r * 6 + c]) * xs.f()[r * 6 + c];
    }
    CHECK(std::sqrt(ss / 6) == doctest::Approx(1.0).epsilon(1e-5));
    for (int c = 0; c < 6; ++c)  // the row divided by its own RMS, nothing subtracted
      CHECK(out[r * 6 + c] == doctest::Approx(xs.f()[r * 6 + c] / std::sqrt(xss / 6)).epsilon(1e-5));
  }
}

TEST_CASE("rotary_embedding: identity at position 0, each pair keeps its length, q . k depends on the distance only") {
  const std::int64_t T = 7, hs = 8;
  Graph g;
  Expr q = input(g, "q", {T, hs});
  Expr k = input(g, "k", {T, hs});
  Expr rq = rotary_embedding(q), rk = rotary_embedding(k);
  Expr rq5 = rotary_embedding(q, 5);  // the same rows at positions 5 ... 11
  Expr rk5 = rotary_embedding(k, 5);
  ParamStore ps;
  // Every row of q the same vector, every row of k another: then q_t . k_s after rotation
  // depends on t - s alone.
  std::vector<float> qv, kv;
  const std::vector<float> q0 = vals(hs, -1.f, 1.f, 11), k0 = vals(hs, -1.f, 1.f, 12);
  for (std::int64_t t = 0; t < T; ++t) {
    qv.insert(qv.end(), q0.begin(), q0.end());
    kv.insert(kv.end(), k0.begin(), k0.end());
  }
  const std::vector<Tensor> out = run(g, {rq, rk, rq5, rk5}, ps, {{"q", Tensor::f32({T, hs}, qv)}, {"k", Tensor::f32({T, hs}, kv)}});
  auto at = [&](int which, std::int64_t t, std::int64_t i) { return double(out[std::size_t(which)].f()[t * hs + i]); };
  for (std::int64_t i = 0; i < hs; ++i) CHECK(at(0, 0, i) == doctest::Approx(q0[std::size_t(i)]));  // angle 0
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < hs / 2; ++i) {  // pair (i, i + hs/2) rotated, its length kept
      const double before = double(q0[std::size_t(i)]) * q0[std::size_t(i)] +
                            double(q0[std::size_t(i + hs / 2)]) * q0[std::size_t(i + hs / 2)];
      CHECK(at(0, t, i) * at(0, t, i) + at(0, t, i + hs / 2) * at(0, t, i + hs / 2) ==
            doctest::Approx(before).epsilon(1e-5));
    }
  auto dot = [&](int qa, std::int64_t t, int ka, std::int64_t s) {
    double d = 0;
    for (std::int64_t i = 0; i < hs; ++i) d += at(qa, t, i) * at(ka, s, i);
    return d;
  };
  // The first feature pair turns by one radian a position: distances 0..6 give different dots.
  CHECK(std::abs(dot(0, 3, 1, 1) - dot(0, 3, 1, 3)) > 1e-3);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t s = 0; s < T; ++s) {
      CAPTURE(t);
      CAPTURE(s);
      CHECK(dot(0, t, 1, s) == doctest::Approx(dot(2, t, 3, s)).epsilon(1e-4));  // both shifted by 5
      if (t + 1 < T && s + 1 < T) CHECK(dot(0, t, 1, s) == doctest::Approx(dot(0, t + 1, 1, s + 1)).epsilon(1e-4));
    }
}

TEST_CASE("grouped_query_attention: multi-head attention when n_kv_head == n_head, whole groups per key/value head") {
  const Tensor xs = tensor({2, 4, 8}, -1.f, 1.f, 21);
  SUBCASE("n_kv_head == n_head, no rotation: multi_head_attention's values") {
    Graph g;
    Expr x = input(g, "x", {2, 4, 8});
    AttentionResult a = grouped_query_attention(
        x, "attn", {.n_head = 2, .n_kv_head = 2, .bias = true, .rotary = false, .attn = {.mask = causal_mask(g, 4)}});
    Graph h;
    Expr xh = input(h, "x", {2, 4, 8});
    AttentionResult b = multi_head_attention(xh, 2, "attn", true, {.mask = causal_mask(h, 4)});
    ParamStore ps;
    randomize(g, ps);
    const std::vector<Tensor> ga = run(g, {a.out, a.weights}, ps, {{"x", xs}});
    const std::vector<Tensor> gb = run(h, {b.out, b.weights}, ps, {{"x", xs}});  // the same parameters by name
    for (int i = 0; i < 2; ++i) {
      const std::vector<float> va = ga[std::size_t(i)].to_vector(), vb = gb[std::size_t(i)].to_vector();
      REQUIRE(va.size() == vb.size());
      for (std::size_t j = 0; j < va.size(); ++j) CHECK(va[j] == doctest::Approx(vb[j]).epsilon(1e-6));
    }
  }
  SUBCASE("n_kv_head 2 of 4 heads: the key and value weights are (2 hs, D); heads 0, 1 and 2, 3 share them") {
    Graph g;
    Expr x = input(g, "x", {2, 4, 8});
    AttentionResult a = grouped_query_attention(x, "attn", {.n_head = 4, .n_kv_head = 2, .rotary = false});
    ParamStore ps;
    randomize(g, ps);
    CHECK(ps.at("attn.key.weight").shape() == Shape{4, 8});
    CHECK(ps.at("attn.value.weight").shape() == Shape{4, 8});
    CHECK(ps.at("attn.query.weight").shape() == Shape{8, 8});
    CHECK(!ps.has("attn.query.bias"));
    // With every query row the same within each pair of heads (query weight rows of heads
    // 0 and 1 equal, and of heads 2 and 3), the heads of a group have the same weights.
    std::vector<float> wq = ps.at("attn.query.weight").to_vector();
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 8; ++c) {
        wq[std::size_t((2 + r) * 8 + c)] = wq[std::size_t(r * 8 + c)];  // head 1 = head 0
        wq[std::size_t((6 + r) * 8 + c)] = wq[std::size_t((4 + r) * 8 + c)];  // head 3 = head 2
      }
    ps.set("attn.query.weight", Tensor::f32({8, 8}, wq));
    const std::vector<float> w = run(g, {a.weights}, ps, {{"x", xs}})[0].to_vector();  // (2, 4, 4, 4)
    auto head = [&](int b, int h) { return std::vector<float>(w.begin() + (b * 4 + h) * 16, w.begin() + (b * 4 + h + 1) * 16); };
    for (int b = 0; b < 2; ++b) {
      CHECK(head(b, 0) == head(b, 1));
      CHECK(head(b, 2) == head(b, 3));
      CHECK(head(b, 0) != head(b, 2));
    }
  }
}

TEST_CASE("rotary_embedding and grouped_query_attention refuse what they cannot use, at the user's line") {
  Graph g;
  Expr odd = input(g, "odd", {2, 3, 5});
  int line = __LINE__ + 1;
  std::string m = error_of([&] { rotary_embedding(odd); });
  CHECK(contains(m, "rotary_embedding at test_rope_gqa.cpp:" + std::to_string(line)));
  CHECK(contains(m, "the head size 5 of 'odd' (2, 3, 5) is odd"));
  line = __LINE__ + 1;
  m = error_of([&] { rotary_embedding(input(g, "v", {6})); });
  CHECK(contains(m, "rotary_embedding at test_rope_gqa.cpp:" + std::to_string(line)));
  INFO(m);
  CHECK(contains(m, "wants x (..., T, hs), got (6"));
  m = error_of([&] { rotary_embedding(input(g, "q", {3, 4}), -1); });
  CHECK(contains(m, "wants start >= 0 and base > 1, got start -1"));
  Expr x = input(g, "x", {2, 3, 12});
  line = __LINE__ + 1;
  m = error_of([&] { grouped_query_attention(x, "attn", {.n_head = 6, .n_kv_head = 4}); });
  CHECK(contains(m, "grouped_query_attention at test_rope_gqa.cpp:" + std::to_string(line)));
  CHECK(contains(m, "n_head 6 is not a multiple of n_kv_head 4"));
  m = error_of([&] { grouped_query_attention(x, "attn", {.n_head = 5, .n_kv_head = 1}); });
  CHECK(contains(m, "n_embd 12 is not divisible by n_head 5"));
}
