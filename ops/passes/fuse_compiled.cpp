// Fused groups compiled ahead of time (see ops/passes/fuse_compiled.h): a program from
// ops/passes/fused_programs.inc becomes a template argument, and its members unroll into one
// register-resident evaluation per SIMD register of the group's output.
#include "ops/passes/fuse_compiled.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "ops/primitives/elementwise_fn.h"
#include "ops/runtime/config.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd.h"

// The register barrier below is written for these targets; elsewhere every group runs
// interpreted.
#if !defined(GG_SCALAR) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__))
#define GG_COMPILED_FUSION 1
#endif

namespace gg {
namespace {

// One member of a compiled program, as FusedInstr (operands >= 0 members, < 0 inputs);
// flags: stored (S) and reduced (R, one value a row).
struct Instr {
  OpKind op;
  int a = 0, b = 0, c = 0;
  Cmp cmp = Cmp::eq;
  int flags = 0;
  constexpr bool stored() const { return flags & 1; }
  constexpr bool reduced() const { return flags & 2; }
};
constexpr int S = 1, R = 2, SR = 3;

template <std::size_t N, std::size_t NI>
struct Program {
  bool flat;
  std::array<char, NI> forms;  // per input: F, B, R, S or P (fuse_compiled.h)
  std::array<Instr, N> ins;
};

template <std::size_t L, std::size_t N>
constexpr Program<N, L - 1> program(bool flat, const char (&forms)[L], std::array<Instr, N> ins) {
  Program<N, L - 1> p{flat, {}, ins};
  for (std::size_t j = 0; j + 1 < L; ++j) p.forms[j] = forms[j];
  return p;
}

using Kernel = void (*)(const FusedGroup&, std::span<const View>, View, std::span<const View>, std::int64_t,
                        std::int64_t, const RowLimits*);

struct Entry {
  bool flat;
  std::span<const Instr> ins;
  std::string_view forms;
  Kernel run;
};

// Members the compiled kernels run: element-wise ops, expand of a row's value, and sum or
// max over the row (row groups).
bool compilable(OpKind k) { return k == OpKind::expand || k == OpKind::sum || k == OpKind::max || op_elementwise(k); }

#ifdef GG_COMPILED_FUSION
using simd::vf;
constexpr std::int64_t W = std::int64_t(simd::width);

// The value as rounded to float, hidden from the optimizer: no product is contracted with
// a later sum into one fused multiply-add, as none can be when each member goes to memory.
inline vf opaque(vf v) {
  auto r = v.data;
#if defined(__aarch64__)
  asm("" : "+w"(r));
#elif defined(__AVX512F__)
  asm("" : "+v"(r));
#else
  asm("" : "+x"(r));
#endif
  v.data = r;
  return v;
}
inline float opaque(float v) {
#if defined(__aarch64__)
  asm("" : "+w"(v));
#else
  asm("" : "+x"(v));
#endif
  return v;
}

template <class>
inline constexpr bool always_false = false;

// A run: consecutive full members, evaluated together one register of the row at a time.
// run_start / run_end: the run holding full member k.
template <auto P>
constexpr std::size_t run_end(std::size_t k) {
  while (k < P.ins.size() && !P.ins[k].reduced()) ++k;
  return k;
}
template <auto P>
constexpr std::size_t run_start(std::size_t k) {
  while (k > 0 && !P.ins[k - 1].reduced()) --k;
  return k;
}
// Whether full member k is read outside its run (by a reduction, or by a later run): then
// its row is kept, in its stored output or in a scratch row.
template <auto P>
constexpr bool kept_row(std::size_t k) {
  for (std::size_t m = k + 1; m < P.ins.size(); ++m) {
    const Instr& i = P.ins[m];
    const bool reads = i.a == int(k) || (op_arity(i.op) >= 2 && i.b == int(k)) || (op_arity(i.op) >= 3 && i.c == int(k));
    if (reads && (i.reduced() || run_start<P>(m) != run_start<P>(k))) return true;
  }
  return false;
}

// One row of a group (flat groups: one row of no length, col the flat offset).
struct Row {
  const float* const* in;
  float* const* out;  // per member: where its value is stored (stored members, the root), else null
  float* rows;        // scratch rows, member k's at rows + k * n
  float* scal;        // the row's reduced members' values
  std::int64_t r, n;
  std::int64_t prow = 0;  // where a P input's row starts: (r % period) * n
  std::int64_t len = 0;   // values of the row computed (RowLimits), n without limits
};

template <auto P, std::size_t K>
inline float* row_of(const Row& x) {
  if constexpr (P.ins[K].stored() || K + 1 == P.ins.size()) return x.out[K] + x.r * x.n;
  else return x.rows + std::int64_t(K) * x.n;
}

// What the run of full members from K0 reads and writes in one row, taken out of the Row
// once before the run's loop: where each input's and member's row starts, and the values
// that are the same on every column (an R or S input's, a reduced member's, all of which
// come before K0). Kept in locals, these stay in registers; read through the Row inside the
// loop, every store of a register (which may alias anything) made the compiler load the
// Row's pointers and multiply r * n again.
template <auto P>
struct Bases {
  std::array<const float*, P.forms.size()> in{};  // F, B and P inputs: column 0 of the row
  std::array<float, P.forms.size()> in_value{};   // R and S inputs
  std::array<float*, P.ins.size()> row{};          // members: row_of
  std::array<float, P.ins.size()> value{};         // reduced members
};

template <auto P, std::size_t K0>
inline Bases<P> bases(const Row& x) {
  Bases<P> b;
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    ([&] {
      constexpr char form = P.forms[J];
      const float* p = x.in[J];
      if constexpr (form == 'F') b.in[J] = p + x.r * x.n;
      else if constexpr (form == 'B') b.in[J] = p;
      else if constexpr (form == 'P') b.in[J] = p + x.prow;
      else if constexpr (form == 'R') b.in_value[J] = p[x.r];
      else b.in_value[J] = p[0];
    }(), ...);
  }(std::make_index_sequence<P.forms.size()>{});
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ([&] {
      if constexpr (!P.ins[K].reduced()) b.row[K] = row_of<P, K>(x);
      else if constexpr (K < K0) b.value[K] = x.scal[K];  // later ones are not computed yet
    }(), ...);
  }(std::make_index_sequence<P.ins.size()>{});
  return b;
}

template <auto P, int J>
inline vf input(const Bases<P>& b, std::int64_t col) {
  constexpr char form = P.forms[std::size_t(J)];
  if constexpr (form == 'F' || form == 'B' || form == 'P') return simd::load(b.in[J] + col);
  else return vf(b.in_value[J]);
}

// Operand O of a member of the run starting at K0, at one register of the row.
template <auto P, std::size_t K0, int O>
inline vf operand(const vf* v, const Bases<P>& b, std::int64_t col) {
  if constexpr (O < 0) return input<P, -O - 1>(b, col);
  else if constexpr (P.ins[std::size_t(O)].reduced()) return vf(b.value[O]);
  else if constexpr (std::size_t(O) >= K0) return v[O];
  else return simd::load(b.row[O] + col);
}

// The element function of op on operands a(), b(), c() (values or registers): the
// record's functor for the unary and binary primitives (ops/primitives/elementwise_fn.h).
template <auto I, class F1, class F2, class F3>
inline auto element(F1 a, F2 b, F3 c) {
  if constexpr (requires { typename element_of<I.op>::type; }) {
    using F = typename element_of<I.op>::type;
    if constexpr (op_arity(I.op) == 1) return F{}(a());
    else return F{}(a(), b());
  } else if constexpr (I.op == OpKind::compare) return fn::compare<int(I.cmp)>{}(a(), b());
  else if constexpr (I.op == OpKind::where) return fn::where{}(a(), b(), c());
  else if constexpr (I.op == OpKind::expand) return a();  // a row's value (or an input) on every column
  else static_assert(always_false<decltype(I)>, "not an element-wise member");
}

template <auto P, std::size_t K0, std::size_t K>
inline void full_member(vf* v, const Bases<P>& b, std::int64_t col) {
  constexpr Instr I = P.ins[K];
  v[K] = opaque(element<I>([&] { return operand<P, K0, I.a>(v, b, col); },
                           [&] { return operand<P, K0, I.b>(v, b, col); },
                           [&] { return operand<P, K0, I.c>(v, b, col); }));
  if constexpr (I.stored() || K + 1 == P.ins.size() || kept_row<P>(K)) simd::store(b.row[K] + col, v[K]);
}

template <auto P, int O>
inline float scalar_operand(const Row& x) {
  if constexpr (O >= 0) {
    static_assert(P.ins[std::size_t(O)].reduced(), "a reduced member reads reduced members and row values only");
    return x.scal[O];
  } else {
    constexpr char form = P.forms[std::size_t(-O - 1)];
    static_assert(form == 'R' || form == 'S', "a reduced member reads reduced members and row values only");
    return form == 'R' ? x.in[-O - 1][x.r] : x.in[-O - 1][0];
  }
}

template <auto P, std::size_t K>
inline void reduced_member(const Row& x) {
  constexpr Instr I = P.ins[K];
  float r;
  if constexpr (I.op == OpKind::sum || I.op == OpKind::max) {  // the row function of the unfused kernel
    const float* src;
    if constexpr (I.a < 0) {
      static_assert(P.forms[std::size_t(-I.a - 1)] == 'F', "a row reduction reads a full row");
      src = x.in[-I.a - 1] + x.r * x.n;
    } else {
      static_assert(!P.ins[std::size_t(I.a)].reduced(), "a row reduction reads a full row");
      src = row_of<P, std::size_t(I.a)>(x);
    }
    // With row limits the values past len are zeros (a sum's) or -inf (a maximum's).
    r = I.op == OpKind::sum ? simd::sum_prefix(std::size_t(x.n), std::size_t(x.len), src)
                            : simd::max_of(std::size_t(x.len), src);
  } else {
    static_assert(!transcendental(I.op), "a reduced transcendental member runs interpreted");
    r = element<I>([&] { return scalar_operand<P, I.a>(x); },
                   [&] {
                     if constexpr (op_arity(I.op) >= 2) return scalar_operand<P, I.b>(x);
                     else return 0.f;
                   },
                   [&] {
                     if constexpr (op_arity(I.op) >= 3) return scalar_operand<P, I.c>(x);
                     else return 0.f;
                   });
  }
  x.scal[K] = opaque(r);
  if constexpr (I.stored() || K + 1 == P.ins.size()) x.out[K][x.r] = x.scal[K];
}

// Whether members [k0, k1) hold a transcendental (erf, exp, ...): a long dependent chain,
// run two registers at a time (see run_from).
template <auto P>
constexpr bool has_transcendental(std::size_t k0, std::size_t k1) {
  for (std::size_t k = k0; k < k1; ++k)
    if (transcendental(P.ins[k].op)) return true;
  return false;
}

// Members K onwards of one row: a reduced member, or a run of full ones over the row.
template <auto P, std::size_t K>
inline void run_from(const Row& x, std::int64_t col0, std::int64_t col1) {
  if constexpr (K < P.ins.size()) {
    if constexpr (P.ins[K].reduced()) {
      reduced_member<P, K>(x);
      run_from<P, K + 1>(x, col0, col1);
    } else {
      constexpr std::size_t E = run_end<P>(K);
      const Bases<P> b = bases<P, K>(x);
      std::int64_t col = col0;
      // A run with a transcendental goes two registers a step, each member for both before
      // the next: two independent chains side by side, as simd::map runs erf and exp
      // (measured faster on the small model's GELU groups, forward and gradient, on one
      // core). The same operations on each value: the same bits. With AVX-512's 32
      // registers only, as simd::map.
      // R registers from column `at`: each member for all R before the next member.
      auto registers = [&]<int R>(std::integral_constant<int, R>, std::int64_t at) {
        vf v[R][P.ins.size()];
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          ([&] {
#pragma GCC unroll 2
            for (int r = 0; r < R; ++r) full_member<P, K, K + I>(v[r], b, at + r * W);
          }(), ...);
        }(std::make_index_sequence<E - K>{});
      };
      if constexpr (W >= 16 && has_transcendental<P>(K, E))
        for (; col + 2 * W <= col1; col += 2 * W) registers(std::integral_constant<int, 2>{}, col);
      for (; col < col1; col += W) registers(std::integral_constant<int, 1>{}, col);
      run_from<P, E>(x, col0, col1);
    }
  }
}

// Row limits: a stored member's (or the root's) values past the row's len take their fill.
template <auto P, std::size_t K>
inline void fill_member(const Row& x, const float* fill, int& j) {
  constexpr Instr I = P.ins[K];
  if constexpr (I.stored() || K + 1 == P.ins.size()) {
    const float v = fill[j++];
    if constexpr (!I.reduced()) std::fill(row_of<P, K>(x) + x.len, row_of<P, K>(x) + x.n, v);
  }
}
template <auto P>
inline void fill_rest(const Row& x, const float* fill) {
  int j = 0;
  [&]<std::size_t... K>(std::index_sequence<K...>) { (fill_member<P, K>(x, fill, j), ...); }(
      std::make_index_sequence<P.ins.size()>{});
}

template <auto P>
constexpr bool has_periodic() {
  for (char f : P.forms)
    if (f == 'P') return true;
  return false;
}

template <auto P>
void run_program(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
                 std::int64_t begin, std::int64_t end, const RowLimits* limits) {
  constexpr std::size_t N = P.ins.size(), NI = P.forms.size();
  std::array<const float*, NI> ip{};
  for (std::size_t j = 0; j < NI; ++j) ip[j] = in[j].f();
  std::array<float*, N> op{};
  for (std::size_t k = 0, s = 0; k + 1 < N; ++k)
    if (P.ins[k].stored()) op[k] = stored[s++].f();
  op[N - 1] = out.f();
  if constexpr (P.flat) {
    // One row of no length, its registers at flat offsets; a last partial register takes
    // the interpreter's scalar tail.
    const std::int64_t whole = begin + (end - begin) / W * W;
    parallel_for((whole - begin) / W, 8192 / W, [&](std::int64_t b, std::int64_t e) {
      const Row x{ip.data(), op.data(), nullptr, nullptr, 0, 0};
      run_from<P, 0>(x, begin + b * W, begin + e * W);
    });
    if (whole < end) run_fused_interpreted(group, in, out, stored, whole, end);
  } else {
    const std::int64_t n = group.n;  // a multiple of W (fused_input_forms)
    const std::int64_t period = group.lead.empty() ? 1 : group.lead.back();  // of P inputs' rows
    parallel_for(end - begin, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t b, std::int64_t e) {
      thread_local std::vector<float> scratch;
      const std::size_t need = N * std::size_t(n) + N;
      if (scratch.size() < need) scratch.resize(need);
      Row x{ip.data(), op.data(), scratch.data(), scratch.data() + N * std::size_t(n), 0, n};
      x.len = n;
      const std::int64_t* lens = limits ? limits->len.data() : nullptr;
      const std::int64_t lperiod = limits ? std::int64_t(limits->len.size()) : 1;
      for (std::int64_t r = begin + b; r < begin + e; ++r) {
        x.r = r;
        if constexpr (has_periodic<P>()) x.prow = r % period * n;
        if (lens) x.len = lens[r % lperiod];
        run_from<P, 0>(x, 0, x.len);
        if (x.len < n) fill_rest<P>(x, limits->fill.data());
      }
    });
  }
}

template <auto P>
constexpr Entry entry() {
  return {P.flat, std::span<const Instr>(P.ins), std::string_view(P.forms.data(), P.forms.size()), &run_program<P>};
}

namespace table {
using enum OpKind;
constexpr bool flat = true, row = false;
#define GG_FUSED(layout, forms, ...) entry<program(layout, forms, std::to_array<Instr>({__VA_ARGS__}))>(),
const Entry entries[] = {
#include "ops/passes/fused_programs.inc"
};
#undef GG_FUSED
}  // namespace table
std::span<const Entry> entries() { return table::entries; }

// Row r of the input at (r % lead.back()) * n: a (T, n) table over lead dims (..., T).
bool periodic(const FusedGroup& group, const FusedRead& r) {
  if (r.inner != 1 || group.lead.size() < 2 || r.lead_stride.size() != group.lead.size()) return false;
  for (std::size_t d = 0; d + 1 < r.lead_stride.size(); ++d)
    if (r.lead_stride[d] != 0) return false;
  return r.lead_stride.back() == group.n;
}
#else
std::span<const Entry> entries() { return {}; }
#endif

bool same_program(const Entry& e, const FusedGroup& group, const std::string& forms) {
  if (e.flat != group.flat || e.ins.size() != group.program.size() || e.forms != forms) return false;
  for (std::size_t k = 0; k < e.ins.size(); ++k) {
    const Instr& c = e.ins[k];
    const FusedInstr& f = group.program[k];
    const int arity = op_arity(f.op);
    if (c.op != f.op || c.reduced() != f.reduced || c.stored() != f.stored || c.a != f.a) return false;
    if ((arity >= 2 && c.b != f.b) || (arity >= 3 && c.c != f.c) || (f.op == OpKind::compare && c.cmp != f.cmp))
      return false;
  }
  return true;
}

}  // namespace

std::string fused_input_forms(const Graph& g, const FusedGroup& group) {
#ifdef GG_COMPILED_FUSION
  std::string forms;
  if (group.flat) {
    for (NodeId in : group.inputs) forms += numel(g.node(in).shape) == 1 ? 'S' : 'F';
    return forms;
  }
  if (group.n % W != 0) return "";
  for (const FusedRead& r : group.reads) {
    if (r.step == group.n && r.inner == 1) forms += 'F';
    else if (r.step == 0 && r.inner == 1) forms += 'B';
    else if (r.step == 1 && r.inner == 0) forms += 'R';
    else if (r.step == 0 && r.inner == 0) forms += 'S';
    else if (periodic(group, r)) forms += 'P';
    else return "";
  }
  return forms;
#else
  (void)g, (void)group;
  return "";
#endif
}

int find_compiled(const FusedGroup& group, const std::string& forms) {
  const std::span<const Entry> es = entries();
  for (std::size_t i = 0; i < es.size(); ++i)
    if (same_program(es[i], group, forms)) return int(i);
  return -1;
}

void run_compiled(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
                  std::int64_t begin, std::int64_t end, const RowLimits* limits) {
  if (limits) GG_CHECK(!group.flat && !limits->len.empty() && limits->fill.size() == group.stored.size() + 1);
  entries()[std::size_t(group.compiled)].run(group, in, out, stored, begin, end, limits);
}

std::string compiled_entry(const FusedGroup& group, const std::string& forms) {
  if (forms.empty()) return "";
  std::string s = fmt::format("GG_FUSED({}, \"{}\"", group.flat ? "flat" : "row", forms);
  for (const FusedInstr& f : group.program) {
    // Reduced members read reduced members and row values; a reduced transcendental
    // member would need the interpreter's SIMD/scalar split over rows.
    if (!compilable(f.op) || (f.reduced && transcendental(f.op))) return "";
    const int arity = op_arity(f.op), flags = (f.stored ? S : 0) | (f.reduced ? R : 0);
    s += fmt::format(", {{{}, {}", op_name(f.op), f.a);
    const bool full = flags != 0 || f.op == OpKind::compare;
    if (arity >= 2 || full) s += fmt::format(", {}", f.b);
    if (arity >= 3 || full) s += fmt::format(", {}", f.c);
    if (full) s += fmt::format(", Cmp::{}, {}", cmp_name(f.cmp), flags == 0 ? "0" : flags == S ? "S" : flags == R ? "R" : "SR");
    s += "}";
  }
  return s + ")";
}

int compiled_count() { return int(entries().size()); }

FusedGroup compiled_group(int i, std::int64_t rows, std::int64_t n, std::string& forms) {
  const Entry& e = entries()[std::size_t(i)];
  FusedGroup g;
  g.flat = e.flat;
  forms.assign(e.forms);
  // P inputs: a table of `period` rows over lead (rows / period, period).
  const std::int64_t period = forms.find('P') == std::string::npos ? 0 : rows % 3 == 0 ? 3 : rows;
  g.lead = period ? Shape{rows / period, period} : Shape{rows};
  g.n = e.flat ? 1 : n;
  for (std::size_t k = 0; k < e.ins.size(); ++k) {
    const Instr& c = e.ins[k];
    FusedInstr f{c.op, c.a, c.b, c.c};
    f.cmp = c.cmp;
    f.stored = c.stored();
    f.reduced = c.reduced();
    g.program.push_back(f);
    g.members.push_back(NodeId(k));
    if (c.stored()) g.stored.push_back(NodeId(k));
  }
  g.root = g.members.back();
  for (std::size_t j = 0; j < e.forms.size(); ++j) {
    g.inputs.push_back(NodeId(1000 + j));
    if (e.flat) continue;
    FusedRead r;
    const char f = e.forms[j];
    r.inner = f == 'F' || f == 'B' || f == 'P' ? 1 : 0;
    r.step = f == 'F' ? n : f == 'R' ? 1 : f == 'P' ? -1 : 0;
    const std::int64_t s = f == 'F' ? n : f == 'R' ? 1 : 0;  // row stride
    if (period) r.lead_stride = {s * period, f == 'P' ? n : s};
    else r.lead_stride = {s};
    g.reads.push_back(r);
  }
  g.compiled = i;
  return g;
}

bool compiled_by_default() { return env_config().compiled; }

}  // namespace gg
