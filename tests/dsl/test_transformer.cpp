// Tests for dsl/transformer.cpp: gradient checks of cross-attention and the decoder block,
// what their masks do to the output, the encoder and decoder stacks' shapes and parameter
// names, the 2-D positional encodings against their formula, and errors at the user's line.
// The PyTorch goldens are in test_transformer_golden.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dsl/transformer.h"
#include "tests/dsl/dsl_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace gg;
using namespace gg::dsl;
using namespace gg::test;

std::set<std::string> param_names(Graph& g) {
  std::set<std::string> s;
  for (Expr p : params(g)) s.insert(p.name());
  return s;
}

const Init& init_of(Graph& g, const std::string& name) {
  const NodeId id = g.find(name, OpKind::param);
  REQUIRE_MESSAGE(id >= 0, "no parameter " << name);
  return g.node(id).attrs.init;
}

// The parameter names of one decoder block "<p>".
std::vector<std::string> decoder_block_names(const std::string& p) {
  std::vector<std::string> v;
  for (const char* a : {"self_attn", "cross_attn"})
    for (const char* l : {"query", "key", "value", "proj"})
      for (const char* w : {"weight", "bias"}) v.push_back(p + "." + a + "." + l + "." + w);
  for (const char* l : {"norm1", "norm2", "norm3", "mlp.fc1", "mlp.fc2"})
    for (const char* w : {"weight", "bias"}) v.push_back(p + "." + l + "." + w);
  return v;
}

}  // namespace

// ---- cross-attention -------------------------------------------------------------------

TEST_CASE("gradcheck: cross_attention, Tq 2 != Tk 3, 2 heads, a source padding mask") {
  Graph g;
  Expr x = input(g, "x", {2, 2, 4});        // x: (B, Tq, D)
  Expr memory = input(g, "mem", {2, 3, 4});  // memory: (B, Tk, D)
  Expr keep = input(g, "keep", {2, 3});      // keep: (B, Tk), batch 1 pads its last key
  AttentionResult r = cross_attention(x, memory, 2, "xattn", true, {.mask = padding_mask(keep)});
  CHECK(r.out.shape() == Shape{2, 2, 4});
  CHECK(r.weights.shape() == Shape{2, 2, 2, 3});
  CHECK(param_names(g) == std::set<std::string>{"xattn.query.weight", "xattn.query.bias", "xattn.key.weight",
                                                 "xattn.key.bias", "xattn.value.weight", "xattn.value.bias",
                                                 "xattn.proj.weight", "xattn.proj.bias"});
  ParamStore ps;
  randomize(g, ps, 0.8f);
  const std::map<std::string, Tensor> in = {{"x", tensor({2, 2, 4}, -1, 1, 21)},
                                            {"mem", tensor({2, 3, 4}, -1, 1, 22)},
                                            {"keep", Tensor::f32({2, 3}, std::vector<float>{1, 1, 1, 1, 1, 0})}};
  check_grads(g, weighted_sum(r.out), ps, in, {x, memory});

  // Every row of weights sums to 1 and the padded key gets exactly 0.
  Tensor w = run(g, {r.weights}, ps, in)[0];  // w: (B, H, Tq, Tk)
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 2; ++q) {
        const float* row = w.f() + ((b * 2 + h) * 2 + q) * 3;
        CHECK(row[0] + row[1] + row[2] == doctest::Approx(1.0).epsilon(1e-6));
        if (b == 1) CHECK(row[2] == 0.f);
        else CHECK(row[2] > 0.f);
      }
}

TEST_CASE("cross_attention of x onto itself is multi_head_attention (same names, same values)") {
  Graph g;
  Expr x = input(g, "x", {2, 3, 6});
  AttentionResult self = multi_head_attention(x, 3, "attn", true, {.mask = causal_mask(g, 3)});
  const std::int32_t n_params = std::int32_t(params(g).size());
  AttentionResult cross = cross_attention(x, x, 3, "attn", true, {.mask = causal_mask(g, 3)});
  CHECK(std::int32_t(params(g).size()) == n_params);  // cross-attention declared no new parameter
  ParamStore ps;
  randomize(g, ps, 0.7f);
  std::vector<Tensor> v = run(g, {self.out, cross.out, self.weights, cross.weights}, ps, {{"x", tensor({2, 3, 6}, -1, 1, 5)}});
  CHECK(v[0].to_vector() == v[1].to_vector());
  CHECK(v[2].to_vector() == v[3].to_vector());
}

TEST_CASE("cross_attention: memory of another width is projected to D; bad shapes are refused at the user's line") {
  Graph g;
  Expr x = input(g, "x", {2, 3, 4});
  Expr mem6 = input(g, "mem6", {2, 5, 6});
  AttentionResult r = cross_attention(x, mem6, 2, "xattn");
  CHECK(r.out.shape() == Shape{2, 3, 4});
  CHECK(r.weights.shape() == Shape{2, 2, 3, 5});
  CHECK(g.node(g.find("xattn.key.weight", OpKind::param)).shape == Shape{4, 6});

  Expr other_batch = input(g, "mem3", {3, 5, 4});
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH_AS(cross_attention(x, other_batch, 2, "bad"),
                       doctest::Contains(("cross_attention at test_transformer.cpp:" + std::to_string(line) +
                                          " ('bad'): wants x (B, Tq, D) and memory (B, Tk, Dm) with the same B, "
                                          "got (2, 3, 4) ('x') and (3, 5, 4) ('mem3')").c_str()),
                       GraphError);
  line = __LINE__ + 1;
  CHECK_THROWS_WITH_AS(cross_attention(x, mem6, 3, "bad"),
                       doctest::Contains(("cross_attention at test_transformer.cpp:" + std::to_string(line) +
                                          " ('bad'): n_embd 4 is not divisible by n_head 3").c_str()),
                       GraphError);
}

// ---- decoder block and stacks ------------------------------------------------------------

TEST_CASE("gradcheck: decoder_block (B 2, Tq 3, Tk 4, D 4, 2 heads, memory padding), erf and tanh GELU") {
  for (GeluKind k : {GeluKind::erf, GeluKind::tanh}) {
    CAPTURE(int(k));
    Graph g;
    Expr x = input(g, "x", {2, 3, 4});
    Expr memory = input(g, "mem", {2, 4, 4});
    Expr keep = input(g, "keep", {2, 4});
    Expr y = decoder_block(x, memory, "dec.0", {.n_head = 2, .gelu = k}, padding_mask(keep));
    CHECK(y.shape() == Shape{2, 3, 4});
    const std::vector<std::string> want = decoder_block_names("dec.0");
    CHECK(param_names(g) == std::set<std::string>(want.begin(), want.end()));
    CHECK(g.node(g.find("dec.0.mlp.fc1.weight", OpKind::param)).shape == Shape{16, 4});
    ParamStore ps;
    randomize(g, ps, 0.5f);
    check_grads(g, weighted_sum(y), ps,
                {{"x", tensor({2, 3, 4}, -1, 1, 31)},
                 {"mem", tensor({2, 4, 4}, -1, 1, 32)},
                 {"keep", Tensor::f32({2, 4}, std::vector<float>{1, 1, 1, 0, 1, 1, 0, 0})}},
                {x, memory});
  }
}

TEST_CASE("decoder_block: target t depends only on targets 0..t and on unmasked memory rows") {
  const std::int64_t B = 2, Tq = 4, Tk = 5, D = 8;
  Graph g;
  Expr x = input(g, "x", {B, Tq, D});
  Expr memory = input(g, "mem", {B, Tk, D});
  Expr keep = input(g, "keep", {B, Tk});
  Expr y = decoder_block(x, memory, "dec", {.n_head = 2}, padding_mask(keep));
  ParamStore ps;
  randomize(g, ps, 0.5f);
  const Tensor keep_v = Tensor::f32({B, Tk}, std::vector<float>{1, 1, 1, 1, 0, 1, 1, 0, 0, 0});
  const Tensor x0 = tensor({B, Tq, D}, -1, 1, 41), m0 = tensor({B, Tk, D}, -1, 1, 42);
  const std::vector<float> base = run(g, {y}, ps, {{"x", x0}, {"mem", m0}, {"keep", keep_v}})[0].to_vector();

  // Change target 2 of each batch (not by a constant, which norm1 would remove): outputs 0
  // and 1 stay bit for bit, 2 and 3 change.
  std::vector<float> xv = x0.to_vector();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t c = 0; c < D; ++c) xv[std::size_t((b * Tq + 2) * D + c)] += 0.25f * float(c % 3);
  std::vector<float> moved = run(g, {y}, ps, {{"x", Tensor::f32({B, Tq, D}, xv)}, {"mem", m0}, {"keep", keep_v}})[0].to_vector();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < Tq; ++t) {
      bool same = true;
      for (std::int64_t c = 0; c < D; ++c) same &= moved[std::size_t((b * Tq + t) * D + c)] == base[std::size_t((b * Tq + t) * D + c)];
      CAPTURE(b);
      CAPTURE(t);
      CHECK(same == (t < 2));
    }

  // Change every padded memory row (batch 0: row 4, batch 1: rows 2..4): nothing moves;
  // change a kept one (row 1 of batch 1): only batch 1 moves.
  std::vector<float> mv = m0.to_vector();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < Tk; ++s)
      if (keep_v.f()[b * Tk + s] == 0.f)
        for (std::int64_t c = 0; c < D; ++c) mv[std::size_t((b * Tk + s) * D + c)] += 3.f * float(c % 4);
  CHECK(run(g, {y}, ps, {{"x", x0}, {"mem", Tensor::f32({B, Tk, D}, mv)}, {"keep", keep_v}})[0].to_vector() == base);
  for (std::int64_t c = 0; c < D; ++c) mv[std::size_t((1 * Tk + 1) * D + c)] += 0.5f * float(c % 3);
  const std::vector<float> mem_moved =
      run(g, {y}, ps, {{"x", x0}, {"mem", Tensor::f32({B, Tk, D}, mv)}, {"keep", keep_v}})[0].to_vector();
  const std::size_t half = std::size_t(Tq * D);
  CHECK(std::equal(mem_moved.begin(), mem_moved.begin() + std::ptrdiff_t(half), base.begin()));
  CHECK(!std::equal(mem_moved.begin() + std::ptrdiff_t(half), mem_moved.end(), base.begin() + std::ptrdiff_t(half)));
}

TEST_CASE("encoder and decoder stacks: shapes, parameter names, final norms, residual init") {
  const std::int64_t B = 2, Ts = 5, Tt = 3, D = 8;
  Graph g;
  Expr src = input(g, "src", {B, Ts, D});
  Expr tgt = input(g, "tgt", {B, Tt, D});
  Expr keep = input(g, "keep", {B, Ts});
  const TransformerOptions opt{.n_head = 2, .resid_init = normal_init(0.01f)};
  Expr memory = encoder(src, 2, "enc", opt, padding_mask(keep));
  Expr out = decoder(tgt, memory, 3, "dec", opt, padding_mask(keep));
  CHECK(memory.shape() == Shape{B, Ts, D});
  CHECK(out.shape() == Shape{B, Tt, D});

  std::set<std::string> want;
  for (int i = 0; i < 2; ++i) {
    const std::string p = "enc." + std::to_string(i);
    for (const char* l : {"query", "key", "value", "proj"})
      for (const char* w : {"weight", "bias"}) want.insert(p + ".attn." + l + "." + w);
    for (const char* l : {"norm1", "norm2", "mlp.fc1", "mlp.fc2"})
      for (const char* w : {"weight", "bias"}) want.insert(p + "." + l + "." + w);
  }
  for (int i = 0; i < 3; ++i)
    for (const std::string& n : decoder_block_names("dec." + std::to_string(i))) want.insert(n);
  for (const char* n : {"enc.norm_f.weight", "enc.norm_f.bias", "dec.norm_f.weight", "dec.norm_f.bias"}) want.insert(n);
  CHECK(param_names(g) == want);
  CHECK(want.size() == 2 * 16 + 3 * 26 + 4);

  // The residual projections take opt.resid_init, every other matrix the default N(0, 0.02).
  for (const char* n : {"enc.1.attn.proj.weight", "enc.0.mlp.fc2.weight", "dec.2.self_attn.proj.weight",
                        "dec.0.cross_attn.proj.weight", "dec.1.mlp.fc2.weight"}) {
    CAPTURE(n);
    CHECK(init_of(g, n).kind == Init::normal);
    CHECK(init_of(g, n).b == 0.01f);
  }
  for (const char* n : {"enc.0.attn.query.weight", "dec.1.cross_attn.key.weight", "dec.0.mlp.fc1.weight"}) {
    CAPTURE(n);
    CHECK(init_of(g, n).b == 0.02f);
  }
  CHECK(TransformerOptions{}.resid_init.kind == Init::normal);
  CHECK(TransformerOptions{}.resid_init.b == 0.02f);

  // Without bias: no bias parameter anywhere.
  Graph g2;
  Expr s2 = input(g2, "src", {B, Ts, D});
  decoder(s2, encoder(s2, 1, "enc", {.n_head = 2, .bias = false}), 1, "dec", {.n_head = 2, .bias = false});
  for (const std::string& n : param_names(g2)) CHECK_MESSAGE(!n.ends_with(".bias"), n);
  CHECK(param_names(g2).size() == 9 + 14);  // encoder: 8 in the block + norm_f; decoder: 13 + norm_f
}

TEST_CASE("gradcheck: a 2-layer encoder feeding a 1-layer decoder, through both padding masks") {
  Graph g;
  Expr src = input(g, "src", {2, 3, 4});
  Expr tgt = input(g, "tgt", {2, 2, 4});
  Expr keep = input(g, "keep", {2, 3});
  Expr mask = padding_mask(keep);
  Expr y = decoder(tgt, encoder(src, 2, "enc", {.n_head = 2}, mask), 1, "dec", {.n_head = 2}, mask);
  ParamStore ps;
  randomize(g, ps, 0.5f);
  GradcheckOptions o;
  o.max_elements = 16;
  check_grads(g, weighted_sum(y), ps,
              {{"src", tensor({2, 3, 4}, -1, 1, 51)},
               {"tgt", tensor({2, 2, 4}, -1, 1, 52)},
               {"keep", Tensor::f32({2, 3}, std::vector<float>{1, 1, 0, 1, 1, 1})}},
              {src, tgt}, o);
}

// ---- 2-D positional encodings ----------------------------------------------------------

TEST_CASE("positional_encoding_2d: row features then column features, the 1-D formula at d_model / 2") {
  for (auto [rows, cols, d] : std::initializer_list<std::tuple<int, int, int>>{{3, 5, 8}, {1, 1, 4}, {4, 3, 12}, {7, 2, 20}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    CAPTURE(d);
    Graph g;
    Expr pe = positional_encoding_2d(g, rows, cols, d);
    REQUIRE(pe.shape() == Shape{rows * cols, d});
    CHECK(params(g).empty());
    ParamStore ps;
    Tensor t = run(g, {pe}, ps, {})[0];
    const int half = d / 2;
    // P1(p, i) = sin(p w) for even i, cos(p w) for odd i, w = 10000^(-(i - i % 2) / half).
    auto p1 = [&](int pos, int i) {
      const double w = std::pow(10000.0, -double(i - i % 2) / double(half));
      return i % 2 == 0 ? std::sin(pos * w) : std::cos(pos * w);
    };
    double worst = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        for (int i = 0; i < d; ++i) {
          const double want = i < half ? p1(r, i) : p1(c, i - half);
          worst = std::max(worst, std::abs(double(t.f()[(r * cols + c) * d + i]) - want));
        }
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("positional_encoding_2d and positional_embedding_2d line up with patches(), and refuse bad sizes") {
  // 8 x 12 images in 4 x 4 patches: a 2 x 3 grid, one encoding row per patch.
  Graph g;
  Expr img = input(g, "img", {2, 8, 12});
  Expr x = patch_embedding(img, 4, 16, "patch", /*bias=*/false, uniform_init(-0.1f, 0.1f));  // (2, 6, 16)
  Expr sin_x = x + positional_encoding_2d(g, 2, 3, 16);
  Expr learned_x = x + positional_embedding_2d(g, 2, 3, 16, "pos", normal_init(0.5f));
  CHECK(sin_x.shape() == Shape{2, 6, 16});
  CHECK(learned_x.shape() == Shape{2, 6, 16});
  CHECK(param_names(g) == std::set<std::string>{"patch.weight", "pos.weight"});
  CHECK(init_of(g, "patch.weight").kind == Init::uniform);
  CHECK(init_of(g, "pos.weight").b == 0.5f);
  CHECK(g.node(g.find("pos.weight", OpKind::param)).shape == Shape{6, 16});
  Expr defaults = positional_embedding_2d(g, 2, 3, 16, "pos2");
  CHECK(init_of(g, defaults.name()).kind == Init::normal);
  CHECK(init_of(g, defaults.name()).b == 0.02f);
  Expr pe_default = patch_embedding(img, 4, 16, "patch2");
  (void)pe_default;
  CHECK(init_of(g, "patch2.weight").b == 0.02f);
  CHECK(g.find("patch2.bias", OpKind::param) >= 0);

  int line = __LINE__ + 1;
  CHECK_THROWS_WITH_AS(positional_encoding_2d(g, 2, 3, 6),
                       doctest::Contains(("positional_encoding_2d at test_transformer.cpp:" + std::to_string(line) +
                                          ": wants rows, cols >= 1 and d_model divisible by 4, got 2 x 3 and d_model 6")
                                             .c_str()),
                       GraphError);
  line = __LINE__ + 1;
  CHECK_THROWS_WITH_AS(positional_embedding_2d(g, 0, 3, 8, "p"),
                       doctest::Contains(("positional_embedding_2d at test_transformer.cpp:" + std::to_string(line)).c_str()),
                       GraphError);
}

TEST_CASE("split_heads and merge_heads are inverses, and refuse what they cannot split") {
  Graph g;
  Expr x = input(g, "x", {2, 3, 6});
  Expr h = split_heads(x, 3);
  CHECK(h.shape() == Shape{2, 3, 3, 2});
  Expr back = merge_heads(h);
  ParamStore ps;
  const Tensor xv = tensor({2, 3, 6}, -1, 1, 61);
  std::vector<Tensor> v = run(g, {h, back}, ps, {{"x", xv}});
  CHECK(v[1].to_vector() == xv.to_vector());
  // head j of token t holds features j*hs .. j*hs + hs - 1
  CHECK(v[0].f()[((1 * 3 + 2) * 3 + 1) * 2 + 1] == xv.f()[(1 * 3 + 1) * 6 + 2 * 2 + 1]);
  CHECK_THROWS_WITH_AS(split_heads(x, 4), doctest::Contains("split_heads at test_transformer.cpp"), GraphError);
  CHECK_THROWS_WITH_AS(merge_heads(x), doctest::Contains("wants (B, H, T, hs), got (2, 3, 6)"), GraphError);
}
