// Attention as one primitive pair, in FlashAttention-2's scheme (Dao, 2023) on the CPU.
// `attention` computes softmax(scale q k^T, masked) @ v by blocks of keys with an online
// softmax (a running max and sum per query row), keeping only the output and each row's
// log-sum-exp; `attention_back` recomputes the weights block by block from q, k and the
// log-sum-exp and gives dq, dk, dv. Neither stores a (Tq, Tk) matrix, so memory grows
// linearly in T. A block the mask zeroes entirely is skipped (causal attention's upper
// half), a block it leaves whole takes no per-element mask, and one it leaves in part is
// computed in strips over the keys their rows attend to. dsl::attention builds this pair
// (dsl/nn.h says when); the composition of primitives it replaces (matmul, where, softmax,
// matmul) is what the tests hold it to.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cpu/simd.h"
#include "ops/primitives/kernel_util.h"

namespace gg {
namespace {

using i64 = std::int64_t;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The blocks: a query block's rows (BQ) against a key block's (BK). A block's scores,
// probabilities and their gradient (BQ x BK each) and the rows of q, k, v it reads stay in
// L1/L2 for the head sizes the models use (32, 64).
constexpr i64 BQ = 64, BK = 64;

// The shapes of one attention: q (N, Tq, hs), k (N, Tk, hs), v (N, Tk, hv) with N the batch
// dims' product; the mask's (Tq, Tk) dims (mq, mk: 1 or the scores') and, per batch index,
// the slice of the mask it reads (its batch dims may be 1: broadcast).
struct Dims {
  i64 N = 1, Tq = 0, Tk = 0, hs = 0, hv = 0;
  bool masked = false;
  i64 mq = 1, mk = 1, slices = 1;
  std::vector<i64> slice_of;  // per batch index
  i64 nqb() const { return (Tq + BQ - 1) / BQ; }
  i64 nkb() const { return (Tk + BK - 1) / BK; }
};

Dims dims_of(const Shape& q, const Shape& k, const Shape& v, const Shape* mask) {
  Dims d;
  const std::size_t r = q.size();
  for (std::size_t i = 0; i + 2 < r; ++i) d.N *= q[i];
  d.Tq = q[r - 2], d.hs = q[r - 1], d.Tk = k[r - 2], d.hv = v[r - 1];
  d.slice_of.assign(std::size_t(d.N), 0);
  if (!mask) return d;
  d.masked = true;
  d.mq = (*mask)[r - 2], d.mk = (*mask)[r - 1];
  d.slices = 1;
  for (std::size_t i = 0; i + 2 < r; ++i) d.slices *= (*mask)[i];
  for (i64 n = 0; n < d.N; ++n) {  // n's multi-index over q's batch dims, read through the mask's
    i64 rem = n, s = 0, stride = 1;
    for (std::size_t i = r - 2; i-- > 0;) {
      const i64 idx = rem % q[i];
      rem /= q[i];
      if ((*mask)[i] != 1) s += idx * stride;
      stride *= (*mask)[i];
    }
    d.slice_of[std::size_t(n)] = s;
  }
  return d;
}

// Row i of mask slice s, to be read at key j as row[mk == 1 ? 0 : j].
const float* mask_row(const Dims& d, const float* mask, i64 s, i64 i) {
  return mask + (s * d.mq + (d.mq == 1 ? 0 : i)) * d.mk;
}

// What the mask makes of a block: every score masked (skipped), none masked (no per-element
// mask), or some (masked element by element, in strips: see Blocks).
enum Block : std::uint8_t { skip = 0, whole = 1, mixed = 2 };

// A mixed block is computed in strips of SR rows, each over only the columns its rows attend
// to (causal attention's diagonal blocks: a strip's first columns, about half the block).
constexpr i64 SR = 16, kStrips = BQ / SR;
static_assert(BQ % SR == 0 && BK < 256);

// The blocks of every mask slice, [(s * nqb + qb) * nkb + kb]: what the mask makes of each
// (cls) and, for each of a block's strips, the columns its rows attend to, [first, end)
// within the block (span, two bytes a strip; empty when first == end). Both empty without a
// mask (every block whole). One read of the mask a kernel call, shared by the batch indices
// that read the same slice. A nonzero entry (NaN too) attends, as `where` reads a condition.
struct Blocks {
  std::vector<std::uint8_t> cls, span;
};

Blocks classify(const Dims& d, const float* mask) {
  Blocks bl;
  if (!d.masked) return bl;
  const i64 nqb = d.nqb(), nkb = d.nkb();
  bl.cls.assign(std::size_t(d.slices * nqb * nkb), skip);
  bl.span.assign(bl.cls.size() * kStrips * 2, 0);
  parallel_for(d.slices * nqb, 1, [&](i64 b, i64 e) {
    std::vector<char> ones(static_cast<std::size_t>(nkb)), zeros(static_cast<std::size_t>(nkb));
    for (i64 t = b; t < e; ++t) {
      const i64 s = t / nqb, qb = t % nqb, i0 = qb * BQ, i1 = std::min(d.Tq, i0 + BQ);
      std::fill(ones.begin(), ones.end(), 0);
      std::fill(zeros.begin(), zeros.end(), 0);
      std::uint8_t* span = bl.span.data() + t * nkb * kStrips * 2;  // span[(kb * kStrips + strip) * 2 + 0|1]
      for (i64 kb = 0; kb < nkb; ++kb)
        for (i64 st = 0; st < kStrips; ++st) span[(kb * kStrips + st) * 2] = std::uint8_t(BK);  // first: none yet
      for (i64 i = i0; i < i1; ++i) {
        if (d.mq == 1 && i > i0) {  // the same row for every query: copy the first's spans down
          for (i64 kb = 0; kb < nkb; ++kb)
            for (i64 st = 1; st < kStrips; ++st)
              for (int c = 0; c < 2; ++c) span[(kb * kStrips + st) * 2 + c] = span[kb * kStrips * 2 + c];
          break;
        }
        const float* row = mask_row(d, mask, s, i);
        const i64 st = (i - i0) / SR;
        for (i64 kb = 0; kb < nkb; ++kb) {
          const i64 j0 = kb * BK, cols = std::min(BK, d.Tk - j0);
          i64 nz = 0, first = cols, end = 0;
          if (d.mk == 1) {
            nz = row[0] != 0.f ? cols : 0;
          } else {
            for (i64 j = 0; j < cols; ++j) nz += row[j0 + j] != 0.f;
          }
          if (nz == cols) first = 0, end = cols;
          else if (nz > 0)  // a row that is part masked: where its attended columns start and end
            for (i64 j = 0; j < cols; ++j)
              if (row[j0 + j] != 0.f) first = std::min(first, j), end = j + 1;
          if (nz > 0) ones[std::size_t(kb)] = 1;
          if (nz < cols) zeros[std::size_t(kb)] = 1;
          std::uint8_t* sp = span + (kb * kStrips + st) * 2;
          if (first < end) sp[0] = std::uint8_t(std::min<i64>(sp[0], first)), sp[1] = std::uint8_t(std::max<i64>(sp[1], end));
        }
      }
      for (i64 kb = 0; kb < nkb; ++kb)
        bl.cls[std::size_t(t * nkb + kb)] = !ones[std::size_t(kb)] ? skip : zeros[std::size_t(kb)] ? mixed : whole;
    }
  });
  return bl;
}

// The index of block (qb, kb) of batch index n among Blocks' entries.
i64 block_index(const Dims& d, i64 n, i64 qb, i64 kb) {
  return (d.slice_of[std::size_t(n)] * d.nqb() + qb) * d.nkb() + kb;
}

Block block_of(const Dims& d, const Blocks& bl, i64 n, i64 qb, i64 kb) {
  if (bl.cls.empty()) return whole;
  return Block(bl.cls[std::size_t(block_index(d, n, qb, kb))]);
}

// A rectangle of a block that is computed: rows [r0, r0 + rows) and columns [c0, c0 + cols)
// of the block, masked element by element or not.
struct Tile {
  i64 r0, rows, c0, cols;
  bool masked;
};

// The tiles of block (qb, kb) of batch index n (rows x cols): the whole block, or a mixed
// one's strips that attend to some key, each over its own columns.
template <class F>
void for_tiles(const Dims& d, const Blocks& bl, i64 n, i64 qb, i64 kb, i64 rows, i64 cols, F f) {
  const Block blk = block_of(d, bl, n, qb, kb);
  if (blk == skip) return;
  if (blk == whole) return f(Tile{0, rows, 0, cols, false});
  const std::uint8_t* span = bl.span.data() + block_index(d, n, qb, kb) * kStrips * 2;
  for (i64 st = 0; st * SR < rows; ++st) {
    const i64 first = span[st * 2], end = span[st * 2 + 1];
    if (first < end) f(Tile{st * SR, std::min(SR, rows - st * SR), first, end - first, true});
  }
}

// -inf where the mask is 0 in a mixed block's scores S (rows x cols, row stride BK).
void mask_block(const Dims& d, const float* mask, i64 n, i64 i0, i64 rows, i64 j0, i64 cols, float* S) {
  const i64 s = d.slice_of[std::size_t(n)];
  for (i64 r = 0; r < rows; ++r) {
    const float* m = mask_row(d, mask, s, i0 + r);
    float* sr = S + r * BK;
    if (d.mk == 1) {
      if (m[0] == 0.f) std::fill(sr, sr + cols, kNegInf);
      continue;
    }
    simd::zip(std::size_t(cols), sr, sr, m + j0, [](auto x, auto keep) {
      using V = decltype(x);
      return simd::select(simd::not_equal(keep, V(0.f)), x, V(kNegInf));
    });
  }
}

// The order the query blocks of one batch index are handed out in: 0, last, 1, last - 1, ...
// so that each thread's contiguous share of them holds light and heavy causal blocks alike.
i64 interleaved(i64 p, i64 nqb) { return p % 2 == 0 ? p / 2 : nqb - 1 - p / 2; }

// ---- forward -------------------------------------------------------------------------------

// out (N, Tq, hv + 1): row i of batch n is softmax_j(scale q_i . k_j, masked) v_j, then
// log(sum_j exp(scale q_i . k_j)) over the unmasked keys (-inf when there is none; the
// output is then 0/0 = NaN, as the composition's softmax of a row of -inf gives NaN weights).
void attention_kernel(const KernelArgs& a) {
  const Dims d = dims_of(*a.in[0].shape, *a.in[1].shape, *a.in[2].shape, a.in.size() > 3 ? a.in[3].shape : nullptr);
  const float scale = a.node.attrs.scale;
  const float *q = a.in[0].f(), *k = a.in[1].f(), *v = a.in[2].f();
  const float* mask = d.masked ? a.in[3].f() : nullptr;
  float* out = a.out.f();
  const Blocks blocks = classify(d, mask);
  const i64 nqb = d.nqb(), nkb = d.nkb(), hv = d.hv, hs = d.hs;
  parallel_for(d.N * nqb, 1, [&](i64 b, i64 e) {
    // A thread's scratch: the block's scores then probabilities S (BQ, BK), the output's
    // running sum acc (BQ, hv), per row the running max m and sum l, and the block's max
    // mx, shift and rescaling factor corr.
    std::vector<float> buf(std::size_t(BQ * BK + BQ * hv + 5 * BQ));
    float* S = buf.data();
    float* acc = S + BQ * BK;
    float* m = acc + BQ * hv;
    float* l = m + BQ;
    float* mx = l + BQ;
    float* shift = mx + BQ;
    float* corr = shift + BQ;
    for (i64 t = b; t < e; ++t) {
      const i64 n = t / nqb, qb = interleaved(t % nqb, nqb), i0 = qb * BQ, rows = std::min(BQ, d.Tq - i0);
      const float* qi = q + (n * d.Tq + i0) * hs;  // qi: (rows, hs)
      std::fill(acc, acc + rows * hv, 0.f);
      std::fill(m, m + rows, kNegInf);
      std::fill(l, l + rows, 0.f);
      for (i64 kb = 0; kb < nkb; ++kb) {
        const i64 j0 = kb * BK;
        for_tiles(d, blocks, n, qb, kb, rows, std::min(BK, d.Tk - j0), [&](const Tile& tl) {
          const i64 tr = tl.rows, cols = tl.cols, jt = j0 + tl.c0;
          float *mt = m + tl.r0, *lt = l + tl.r0, *at = acc + tl.r0 * hv;
          // S = scale qi kj^T: (tr, cols), the tile's rows and keys
          gemm(false, true, tr, cols, hs, scale, qi + tl.r0 * hs, hs, k + (n * d.Tk + jt) * hs, hs, 0.f, S, BK);
          if (tl.masked) mask_block(d, mask, n, i0 + tl.r0, tr, jt, cols, S);
          // Per row: the tile's max, the running max with it, the shift (0 while no key has
          // been seen: all -inf so far, so that exp gives 0, not NaN) and the factor that
          // rescales the old sums to the new max; across rows at once, as vectors.
          for (i64 r = 0; r < tr; ++r) mx[r] = simd::max_of(std::size_t(cols), S + r * BK);
          simd::zip(std::size_t(tr), mx, mt, mx, [](auto old, auto blk) { return simd::max(old, blk); });
          simd::map(std::size_t(tr), shift, mx, [](auto mnew) {
            using V = decltype(mnew);
            return simd::select(simd::not_equal(mnew, V(kNegInf)), mnew, V(0.f));
          });
          simd::zip(std::size_t(tr), corr, mt, shift, [](auto old, auto sh) { return simd::exp(old - sh); });
          std::copy(mx, mx + tr, mt);
          for (i64 r = 0; r < tr; ++r) {
            float* sr = S + r * BK;
            const float sh = shift[r];
            lt[r] = lt[r] * corr[r] + simd::map_sum(std::size_t(cols), sr, sr, [sh](auto x) {
              using V = decltype(x);
              return simd::exp(x - V(sh));
            });
            if (corr[r] != 1.f)
              for (i64 c = 0; c < hv; ++c) at[r * hv + c] *= corr[r];
          }
          // acc += P vj: (tr, hv)
          gemm(false, false, tr, hv, cols, 1.f, S, BK, v + (n * d.Tk + jt) * hv, hv, 1.f, at, hv);
        });
      }
      for (i64 r = 0; r < rows; ++r) {
        float* o = out + (n * d.Tq + i0 + r) * (hv + 1);
        for (i64 c = 0; c < hv; ++c) o[c] = acc[r * hv + c] / l[r];
        o[hv] = m[r] + std::log(l[r]);  // -inf + log(0) = -inf for a row with every key masked
      }
    }
  });
}

// ---- backward ------------------------------------------------------------------------------

// Key blocks are shared out to `groups` tasks per batch index (block kb to task kb % groups:
// causal work spread evenly), each summing its own part of dq; the parts are added in order
// afterwards. The count depends on the shape alone, so the bits do not depend on the threads.
i64 key_groups(const Dims& d) { return std::clamp<i64>((16 + d.N - 1) / d.N, 1, d.nkb()); }

// out (N, Tq hs + Tk hs + Tk hv): per batch index dq, dk, dv, from the forward's output and
// log-sum-exp (fwd) and d(loss)/d(fwd) (gout): with P = exp(S - lse) recomputed,
//   dv = P^T dO,  dS = P * (dO v^T - D),  D_i = dO_i . O_i - dlse_i,  dq = scale dS k,  dk = scale dS^T q.
void attention_back_kernel(const KernelArgs& a) {
  const bool has_mask = a.in.size() > 5;
  const Dims d = dims_of(*a.in[0].shape, *a.in[1].shape, *a.in[2].shape, has_mask ? a.in[3].shape : nullptr);
  const float scale = a.node.attrs.scale;
  const float *q = a.in[0].f(), *k = a.in[1].f(), *v = a.in[2].f();
  const float* mask = has_mask ? a.in[3].f() : nullptr;
  const float* fwd = a.in[has_mask ? 4 : 3].f();   // fwd: (N, Tq, hv + 1), O then lse
  const float* gout = a.in[has_mask ? 5 : 4].f();  // gout: (N, Tq, hv + 1), dO then dlse
  float* out = a.out.f();
  const i64 hs = d.hs, hv = d.hv, ld = hv + 1, per = d.Tq * hs + d.Tk * (hs + hv);
  const i64 nqb = d.nqb(), nkb = d.nkb(), rows_all = d.N * d.Tq;
  // D and lse per row: (N, Tq) each.
  std::vector<float> D(static_cast<std::size_t>(rows_all)), lse(static_cast<std::size_t>(rows_all));
  parallel_for(rows_all, std::max<i64>(1, 4096 / ld), [&](i64 b, i64 e) {
    for (i64 i = b; i < e; ++i) {
      D[std::size_t(i)] = simd::dot(std::size_t(hv), gout + i * ld, fwd + i * ld) - gout[i * ld + hv];
      lse[std::size_t(i)] = fwd[i * ld + hv];
    }
  });
  const Blocks blocks = classify(d, mask);
  const i64 groups = key_groups(d);
  // dq's parts, (groups, N, Tq, hs); with one group, dq itself.
  std::vector<float> parts(groups > 1 ? std::size_t(groups * rows_all * hs) : 0, 0.f);
  if (groups == 1)
    for (i64 n = 0; n < d.N; ++n) std::fill(out + n * per, out + n * per + d.Tq * hs, 0.f);
  parallel_for(d.N * groups, 1, [&](i64 b, i64 e) {
    // A thread's scratch: P (BQ, BK), dP then dS (BQ, BK), the key block's dk (BK, hs) and dv (BK, hv).
    std::vector<float> buf(std::size_t(2 * BQ * BK + BK * (hs + hv)));
    float* P = buf.data();
    float* dP = P + BQ * BK;
    float* dk = dP + BQ * BK;
    float* dv = dk + BK * hs;
    for (i64 t = b; t < e; ++t) {
      const i64 n = t / groups, grp = t % groups;
      float* dq = groups > 1 ? parts.data() + (grp * d.N + n) * d.Tq * hs : out + n * per;  // dq: (Tq, hs)
      for (i64 kb = grp; kb < nkb; kb += groups) {
        const i64 j0 = kb * BK, cols = std::min(BK, d.Tk - j0);
        const float* kj = k + (n * d.Tk + j0) * hs;  // kj: (cols, hs)
        const float* vj = v + (n * d.Tk + j0) * hv;  // vj: (cols, hv)
        std::fill(dk, dk + cols * hs, 0.f);
        std::fill(dv, dv + cols * hv, 0.f);
        for (i64 qb = 0; qb < nqb; ++qb) {
          const i64 i0 = qb * BQ;
          for_tiles(d, blocks, n, qb, kb, std::min(BQ, d.Tq - i0), cols, [&](const Tile& tl) {
            const i64 tr = tl.rows, tc = tl.cols, row0 = n * d.Tq + i0 + tl.r0;
            const float* qi = q + row0 * hs;      // qi: (tr, hs)
            const float* doi = gout + row0 * ld;  // doi: (tr, hv), row stride hv + 1
            const float* kt = kj + tl.c0 * hs;    // kt: (tc, hs), the tile's keys
            const float* vt = vj + tl.c0 * hv;    // vt: (tc, hv)
            float *dkt = dk + tl.c0 * hs, *dvt = dv + tl.c0 * hv;
            // P = exp(scale qi kt^T - lse): (tr, tc); a masked score is -inf, its P 0.
            gemm(false, true, tr, tc, hs, scale, qi, hs, kt, hs, 0.f, P, BK);
            if (tl.masked) mask_block(d, mask, n, i0 + tl.r0, tr, j0 + tl.c0, tc, P);
            for (i64 r = 0; r < tr; ++r) {
              const float shift = lse[std::size_t(row0 + r)];
              simd::map(std::size_t(tc), P + r * BK, P + r * BK, [shift](auto x) {
                using V = decltype(x);
                return simd::exp(x - V(shift));
              });
            }
            // dv += P^T doi: (tc, hv)
            gemm(true, false, tc, hv, tr, 1.f, P, BK, doi, ld, 1.f, dvt, hv);
            // dP = doi vt^T: (tr, tc); then dS = P * (dP - D)
            gemm(false, true, tr, tc, hv, 1.f, doi, ld, vt, hv, 0.f, dP, BK);
            for (i64 r = 0; r < tr; ++r) {
              const float Dr = D[std::size_t(row0 + r)];
              simd::zip(std::size_t(tc), dP + r * BK, P + r * BK, dP + r * BK, [Dr](auto p, auto dp) {
                using V = decltype(p);
                return p * (dp - V(Dr));
              });
            }
            // dq += scale dS kt: (tr, hs);  dk += scale dS^T qi: (tc, hs)
            gemm(false, false, tr, hs, tc, scale, dP, BK, kt, hs, 1.f, dq + (i0 + tl.r0) * hs, hs);
            gemm(true, false, tc, hs, tr, scale, dP, BK, qi, hs, 1.f, dkt, hs);
          });
        }
        float* o = out + n * per;
        std::copy(dk, dk + cols * hs, o + d.Tq * hs + j0 * hs);
        std::copy(dv, dv + cols * hv, o + d.Tq * hs + d.Tk * hs + j0 * hv);
      }
    }
  });
  if (groups == 1) return;
  // dq = the groups' parts added in order.
  parallel_for(rows_all, std::max<i64>(1, 4096 / hs), [&](i64 b, i64 e) {
    for (i64 i = b; i < e; ++i) {
      const i64 n = i / d.Tq, r = i % d.Tq;
      float* dq = out + n * per + r * hs;
      std::copy(parts.data() + i * hs, parts.data() + (i + 1) * hs, dq);
      for (i64 grp = 1; grp < groups; ++grp) {
        const float* p = parts.data() + (grp * rows_all + i) * hs;
        for (i64 c = 0; c < hs; ++c) dq[c] += p[c];
      }
    }
  });
}

// ---- shape rules -----------------------------------------------------------------------------

// q, k, v (and the mask) of an attention or attention_back node: checks them and returns
// the output's leading shape (batch..., Tq).
void check_qkv(const Graph& g, Node& n, bool masked) {
  for (int i = 0; i < 3 + int(masked); ++i)
    detail::require_dtype(g, n, i, DType::f32, i == 0 ? "q" : i == 1 ? "k" : i == 2 ? "v" : "mask");
  const Shape& q = g.node(n.inputs[0]).shape;
  const Shape& k = g.node(n.inputs[1]).shape;
  const Shape& v = g.node(n.inputs[2]).shape;
  auto shapes = [&] {
    return fmt::format("q {}, k {}, v {}", detail::describe(g, n.inputs[0]), detail::describe(g, n.inputs[1]),
                       detail::describe(g, n.inputs[2]));
  };
  const std::size_t r = q.size();
  if (r < 2 || k.size() != r || v.size() != r)
    g.fail(n, fmt::format("q, k and v must have one rank of at least 2 ((..., T, head size)): {}", shapes()));
  if (!std::equal(q.begin(), q.end() - 2, k.begin()) || !std::equal(q.begin(), q.end() - 2, v.begin()))
    g.fail(n, fmt::format("q, k and v must have the same batch dims: {}", shapes()));
  if (k[r - 1] != q[r - 1]) g.fail(n, fmt::format("q and k head sizes differ: {}", shapes()));
  if (v[r - 2] != k[r - 2]) g.fail(n, fmt::format("k and v have different numbers of keys: {}", shapes()));
  if (k[r - 2] == 0) g.fail(n, fmt::format("no keys to attend to: {}", shapes()));
  if (!masked) return;
  const Shape& m = g.node(n.inputs[3]).shape;
  Shape scores(q.begin(), q.end() - 1);
  scores.push_back(k[r - 2]);  // (..., Tq, Tk)
  bool ok = m.size() == r;
  for (std::size_t i = 0; ok && i < r; ++i) ok = m[i] == 1 || m[i] == scores[i];
  if (!ok)
    g.fail(n, fmt::format("mask {} does not fit the scores {}: it must have their rank, each dim 1 or theirs",
                          detail::describe(g, n.inputs[3]), to_string(scores)));
}

std::string scale_text(const Node& n) { return fmt::format("scale={}", n.attrs.scale); }

// ---- f64 references --------------------------------------------------------------------------

// Both rules in double, one query row at a time: s_j = scale q . k_j, -inf where masked.
struct F64Rows {
  const F64Args& a;
  Dims d;
  bool masked;
  F64Rows(const F64Args& a, bool masked)
      : a(a),
        d(dims_of(a.in(0).shape, a.in(1).shape, a.in(2).shape, masked ? &a.in(3).shape : nullptr)),
        masked(masked) {}
  double score(i64 n, i64 i, i64 j) const {
    if (masked) {
      const i64 s = d.slice_of[std::size_t(n)];
      const double m = a.in(3).v[std::size_t((s * d.mq + (d.mq == 1 ? 0 : i)) * d.mk + (d.mk == 1 ? 0 : j))];
      if (m == 0) return -INFINITY;
    }
    double acc = 0;
    for (i64 c = 0; c < d.hs; ++c)
      acc += a.in(0).v[std::size_t((n * d.Tq + i) * d.hs + c)] * a.in(1).v[std::size_t((n * d.Tk + j) * d.hs + c)];
    return double(a.n.attrs.scale) * acc;
  }
};

void attention_f64(const F64Args& a) {
  const F64Rows f(a, a.n.inputs.size() > 3);
  const Dims& d = f.d;
  std::vector<double> s(std::size_t(d.Tk));
  for (i64 n = 0; n < d.N; ++n)
    for (i64 i = 0; i < d.Tq; ++i) {
      double m = -INFINITY;
      for (i64 j = 0; j < d.Tk; ++j) m = std::max(m, s[std::size_t(j)] = f.score(n, i, j));
      double* o = a.out.v.data() + (n * d.Tq + i) * (d.hv + 1);
      if (m == -INFINITY) {  // every key masked: NaN out, as the kernel
        for (i64 c = 0; c < d.hv; ++c) o[c] = NAN;
        o[d.hv] = -INFINITY;
        continue;
      }
      double l = 0;
      for (i64 j = 0; j < d.Tk; ++j) l += s[std::size_t(j)] = std::exp(s[std::size_t(j)] - m);
      for (i64 c = 0; c < d.hv; ++c) {
        double acc = 0;
        for (i64 j = 0; j < d.Tk; ++j) acc += s[std::size_t(j)] * a.in(2).v[std::size_t((n * d.Tk + j) * d.hv + c)];
        o[c] = acc / l;
      }
      o[d.hv] = m + std::log(l);
    }
}

void attention_back_f64(const F64Args& a) {
  const bool masked = a.n.inputs.size() > 5;
  const F64Rows f(a, masked);
  const Dims& d = f.d;
  const std::vector<double>& q = a.in(0).v;
  const std::vector<double>& k = a.in(1).v;
  const std::vector<double>& v = a.in(2).v;
  const std::vector<double>& fwd = a.in(masked ? 4 : 3).v;
  const std::vector<double>& go = a.in(masked ? 5 : 4).v;
  const double scale = a.n.attrs.scale;
  const i64 ld = d.hv + 1, per = d.Tq * d.hs + d.Tk * (d.hs + d.hv);
  for (i64 n = 0; n < d.N; ++n) {
    double* dq = a.out.v.data() + n * per;
    double* dk = dq + d.Tq * d.hs;
    double* dv = dk + d.Tk * d.hs;
    for (i64 i = 0; i < d.Tq; ++i) {
      const double* o = fwd.data() + (n * d.Tq + i) * ld;
      const double* g = go.data() + (n * d.Tq + i) * ld;
      double D = -g[d.hv];
      for (i64 c = 0; c < d.hv; ++c) D += g[c] * o[c];
      for (i64 j = 0; j < d.Tk; ++j) {
        const double p = std::exp(f.score(n, i, j) - o[d.hv]);
        double dp = 0;
        for (i64 c = 0; c < d.hv; ++c) dp += g[c] * v[std::size_t((n * d.Tk + j) * d.hv + c)];
        const double ds = p * (dp - D);
        for (i64 c = 0; c < d.hv; ++c) dv[j * d.hv + c] += p * g[c];
        for (i64 c = 0; c < d.hs; ++c) {
          dq[i * d.hs + c] += scale * ds * k[std::size_t((n * d.Tk + j) * d.hs + c)];
          dk[j * d.hs + c] += scale * ds * q[std::size_t((n * d.Tq + i) * d.hs + c)];
        }
      }
    }
  }
}

// Tangent: a shift of the scores constant along the keys (k varying alone, its tangent the
// same for every key: a key bias adds q_i . b to all of row i) leaves the softmax, so the
// output, unchanged: cancelled, as the composition's max trick is (ops/ir/tangent.h). The
// row's log-sum-exp column does shift; only attention_back reads it, and no gradient is
// taken through that (see its rule). Anything else: constant along no axis.
void tangent_attention(const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
  const std::size_t r = g.node(n.inputs[1]).shape.size();
  if (!tangent_varies(in[0]) && !tangent_varies(in[2]) && tangent_varies(in[1]) && in[1]->constant[r - 2])
    out.cancelled = true;
}

}  // namespace

// ---- attention -------------------------------------------------------------------------------
// With S = scale q k^T (masked: -inf), P = softmax(S), O = P v, lse = log sum exp S, and the
// gradient (dO, dlse) of both (FlashAttention-2's backward, as the attention_back node):
//   dv = P^T dO,  dS = P * (dO v^T - D),  D = rowsum(dO * O) - dlse,  dq = scale dS k,  dk = scale dS^T q
const OpRule attention_rule = {
    OpClass::composite,
    [](const Graph& g, Node& n) {
      if (n.inputs.size() != 3 && n.inputs.size() != 4)
        g.fail(n, fmt::format("takes q, k, v and an optional mask, got {} inputs", n.inputs.size()));
      check_qkv(g, n, n.inputs.size() == 4);
      const Shape& q = g.node(n.inputs[0]).shape;
      n.shape = Shape(q.begin(), q.end() - 1);
      n.shape.push_back(g.node(n.inputs[2]).shape.back() + 1);  // (..., Tq, hv + 1)
      n.dtype = DType::f32;
    },
    attention_kernel,
    [](GradArgs& a) {
      Graph& g = a.g;
      const Node& n = a.n();
      const bool masked = n.inputs.size() == 4;
      const NodeId q = a.in(0), k = a.in(1), v = a.in(2);
      const Shape qs = g.node(q).shape, ks = g.node(k).shape, vs = g.node(v).shape;
      const std::int64_t nq = qs.back() * qs[qs.size() - 2], nk = ks.back() * ks[ks.size() - 2],
                         nv = vs.back() * vs[vs.size() - 2];
      const NodeId back = op::attention_back(g, q, k, v, masked ? a.in(3) : -1, a.node, a.gout, n.attrs.scale);
      const std::int64_t last = std::int64_t(qs.size()) - 2;  // back: (..., nq + nk + nv)
      if (a.needs[0]) a.gin[0] = op::reshape(g, op::slice(g, back, last, 0, nq), qs);
      if (a.needs[1]) a.gin[1] = op::reshape(g, op::slice(g, back, last, nq, nq + nk), ks);
      if (a.needs[2]) a.gin[2] = op::reshape(g, op::slice(g, back, last, nq + nk, nq + nk + nv), vs);
      // The mask gets none: it selects, as `where`'s condition does.
    },
    tangent_attention,
    attention_f64,
    nullptr,
    nullptr,
    scale_text};

// ---- attention_back ----------------------------------------------------------------------------
// Its own gradient (second derivatives of attention) is not built: the rule refuses by name,
// so that a Hessian-vector product never treats this node as a constant. The composition
// (the fused attention off) is differentiable twice.
const OpRule attention_back_rule = {
    OpClass::composite,
    [](const Graph& g, Node& n) {
      if (n.inputs.size() != 5 && n.inputs.size() != 6)
        g.fail(n, fmt::format("takes q, k, v, an optional mask, fwd and gout, got {} inputs", n.inputs.size()));
      const bool masked = n.inputs.size() == 6;
      check_qkv(g, n, masked);
      const Shape& q = g.node(n.inputs[0]).shape;
      const Shape& k = g.node(n.inputs[1]).shape;
      const Shape& v = g.node(n.inputs[2]).shape;
      Shape fs(q.begin(), q.end() - 1);
      fs.push_back(v.back() + 1);
      for (int i = masked ? 4 : 3; i < int(n.inputs.size()); ++i) {
        detail::require_dtype(g, n, i, DType::f32, i == int(n.inputs.size()) - 1 ? "gout" : "fwd");
        if (g.node(n.inputs[std::size_t(i)]).shape != fs)
          g.fail(n, fmt::format("{} {} must be attention's output {}", i == int(n.inputs.size()) - 1 ? "gout" : "fwd",
                                detail::describe(g, n.inputs[std::size_t(i)]), to_string(fs)));
      }
      const std::size_t r = q.size();
      n.shape = Shape(q.begin(), q.end() - 2);
      n.shape.push_back(q[r - 2] * q[r - 1] + k[r - 2] * k[r - 1] + v[r - 2] * v[r - 1]);  // (..., dq dk dv)
      n.dtype = DType::f32;
    },
    attention_back_kernel,
    [](GradArgs& a) {
      a.g.fail(a.n(), "second derivatives of the fused attention are not built; for a Hessian-vector product build the "
                      "model with it off (AttentionOptions::fused = false, gg::FusedAttention or GG_FUSED_ATTENTION=0)");
    },
    nullptr,
    attention_back_f64,
    nullptr,
    nullptr,
    scale_text};

}  // namespace gg
