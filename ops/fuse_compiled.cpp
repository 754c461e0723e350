// Fused groups compiled ahead of time (see ops/fuse_compiled.h): a program from
// ops/fused_programs.inc becomes a template argument, and its members unroll into one
// register-resident evaluation per SIMD register of the group's output.
#include "ops/fuse_compiled.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "ops/elementwise_fn.h"
#include "ops/parallel.h"
#include "ops/simd.h"

// The register barrier below is written for these targets; elsewhere every group runs
// interpreted.
#if !defined(GG_SCALAR) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__))
#define GG_COMPILED_FUSION 1
#endif

namespace gg {
namespace {

// One member of a compiled program, as FusedInstr (operands >= 0 members, < 0 inputs).
struct Instr {
  OpKind op;
  int a = 0, b = 0, c = 0;
  Cmp cmp = Cmp::eq;
  bool stored = false;
};

template <std::size_t N, std::size_t NI>
struct Program {
  bool flat;
  std::array<char, NI> forms;  // per input: F, B, R or S (fuse_compiled.h)
  std::array<Instr, N> ins;
};

template <std::size_t L, std::size_t N>
constexpr Program<N, L - 1> program(bool flat, const char (&forms)[L], std::array<Instr, N> ins) {
  Program<N, L - 1> p{flat, {}, ins};
  for (std::size_t j = 0; j + 1 < L; ++j) p.forms[j] = forms[j];
  return p;
}

using Kernel = void (*)(const FusedGroup&, std::span<const View>, View, std::span<const View>, std::int64_t,
                        std::int64_t);

struct Entry {
  bool flat;
  std::span<const Instr> ins;
  std::string_view forms;
  Kernel run;
};

bool elementwise(OpKind k) {
  switch (k) {
    case OpKind::add: case OpKind::sub: case OpKind::mul: case OpKind::div: case OpKind::maximum:
    case OpKind::neg: case OpKind::exp: case OpKind::log: case OpKind::sqrt: case OpKind::tanh:
    case OpKind::erf: case OpKind::compare: case OpKind::where:
      return true;
    default:
      return false;
  }
}

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

// Where one register of the group sits: row r (0 for flat groups), flat offset `at`
// (r * n + col for row groups), column col of its row.
struct At {
  const float* const* in;
  float* const* out;  // per member: where its value is stored (stored members, the root), else null
  std::int64_t r, at, col;
};

template <char Form>
inline vf load_input(const float* p, const At& x) {
  if constexpr (Form == 'F') return simd::load(p + x.at);
  else if constexpr (Form == 'B') return simd::load(p + x.col);
  else if constexpr (Form == 'R') return vf(p[x.r]);
  else return vf(p[0]);
}

template <auto P, int O>
inline vf operand(const vf* v, const At& x) {
  if constexpr (O >= 0) return v[O];
  else return load_input<P.forms[std::size_t(-O - 1)]>(x.in[-O - 1], x);
}

template <class>
inline constexpr bool always_false = false;

template <auto P, std::size_t K>
inline void member(vf* v, const At& x) {
  constexpr Instr I = P.ins[K];
  auto a = [&] { return operand<P, I.a>(v, x); };
  auto b = [&] { return operand<P, I.b>(v, x); };
  vf r;
  if constexpr (I.op == OpKind::add) r = fn::add{}(a(), b());
  else if constexpr (I.op == OpKind::sub) r = fn::sub{}(a(), b());
  else if constexpr (I.op == OpKind::mul) r = fn::mul{}(a(), b());
  else if constexpr (I.op == OpKind::div) r = fn::div{}(a(), b());
  else if constexpr (I.op == OpKind::maximum) r = fn::maximum{}(a(), b());
  else if constexpr (I.op == OpKind::neg) r = fn::neg{}(a());
  else if constexpr (I.op == OpKind::exp) r = fn::exp{}(a());
  else if constexpr (I.op == OpKind::log) r = fn::log{}(a());
  else if constexpr (I.op == OpKind::sqrt) r = fn::sqrt{}(a());
  else if constexpr (I.op == OpKind::tanh) r = fn::tanh{}(a());
  else if constexpr (I.op == OpKind::erf) r = fn::erf{}(a());
  else if constexpr (I.op == OpKind::compare) r = fn::compare<int(I.cmp)>{}(a(), b());
  else if constexpr (I.op == OpKind::where) r = fn::where{}(a(), b(), operand<P, I.c>(v, x));
  else static_assert(always_false<decltype(P)>, "not an element-wise op");
  v[K] = opaque(r);
  if constexpr (I.stored || K + 1 == P.ins.size()) simd::store(x.out[K] + x.at, v[K]);
}

template <auto P>
inline void eval(const At& x) {
  vf v[P.ins.size()];
  [&]<std::size_t... K>(std::index_sequence<K...>) { (member<P, K>(v, x), ...); }(std::make_index_sequence<P.ins.size()>{});
}

template <auto P>
void run_program(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
                 std::int64_t begin, std::int64_t end) {
  constexpr std::size_t N = P.ins.size(), NI = P.forms.size();
  std::array<const float*, NI> ip{};
  for (std::size_t j = 0; j < NI; ++j) ip[j] = in[j].f();
  std::array<float*, N> op{};
  for (std::size_t k = 0, s = 0; k + 1 < N; ++k)
    if (P.ins[k].stored) op[k] = stored[s++].f();
  op[N - 1] = out.f();
  if constexpr (P.flat) {
    // Whole registers here; a last partial one takes the interpreter's scalar tail.
    const std::int64_t whole = begin + (end - begin) / W * W;
    parallel_for((whole - begin) / W, 8192 / W, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t q = b; q < e; ++q) eval<P>(At{ip.data(), op.data(), 0, begin + q * W, 0});
    });
    if (whole < end) run_fused_interpreted(group, in, out, stored, whole, end);
  } else {
    const std::int64_t n = group.n;  // a multiple of W (fused_input_forms)
    parallel_for(end - begin, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = begin + b; r < begin + e; ++r)
        for (std::int64_t col = 0; col < n; col += W) eval<P>(At{ip.data(), op.data(), r, r * n + col, col});
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
#include "ops/fused_programs.inc"
};
#undef GG_FUSED
}  // namespace table
std::span<const Entry> entries() { return table::entries; }
#else
std::span<const Entry> entries() { return {}; }
#endif

bool same_program(const Entry& e, const FusedGroup& group, const std::string& forms) {
  if (e.flat != group.flat || e.ins.size() != group.program.size() || e.forms != forms) return false;
  for (std::size_t k = 0; k < e.ins.size(); ++k) {
    const Instr& c = e.ins[k];
    const FusedInstr& f = group.program[k];
    const int arity = op_arity(f.op);
    if (c.op != f.op || f.reduced || c.stored != f.stored || c.a != f.a) return false;
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
    else return "";
  }
  return forms;
#else
  (void)g, (void)group;
  return "";
#endif
}

int find_compiled(const FusedGroup& group, const std::string& forms) {
  if (forms.empty() && !group.inputs.empty()) return -1;
  const std::span<const Entry> es = entries();
  for (std::size_t i = 0; i < es.size(); ++i)
    if (same_program(es[i], group, forms)) return int(i);
  return -1;
}

void run_compiled(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
                  std::int64_t begin, std::int64_t end) {
  entries()[std::size_t(group.compiled)].run(group, in, out, stored, begin, end);
}

std::string compiled_entry(const FusedGroup& group, const std::string& forms) {
  if (forms.empty()) return "";
  std::string s = fmt::format("GG_FUSED({}, \"{}\"", group.flat ? "flat" : "row", forms);
  for (const FusedInstr& f : group.program) {
    if (f.reduced || !elementwise(f.op)) return "";
    const int arity = op_arity(f.op);
    s += fmt::format(", {{{}, {}", op_name(f.op), f.a);
    if (arity >= 2 || f.stored || f.op == OpKind::compare) s += fmt::format(", {}", f.b);
    if (arity >= 3 || f.stored || f.op == OpKind::compare) s += fmt::format(", {}", f.c);
    if (f.stored || f.op == OpKind::compare) s += fmt::format(", Cmp::{}", cmp_name(f.cmp));
    if (f.stored) s += ", true";
    s += "}";
  }
  return s + ")";
}

int compiled_count() { return int(entries().size()); }

FusedGroup compiled_group(int i, std::int64_t rows, std::int64_t n, std::string& forms) {
  const Entry& e = entries()[std::size_t(i)];
  FusedGroup g;
  g.flat = e.flat;
  g.lead = {rows};
  g.n = e.flat ? 1 : n;
  forms.assign(e.forms);
  for (std::size_t k = 0; k < e.ins.size(); ++k) {
    const Instr& c = e.ins[k];
    FusedInstr f{c.op, c.a, c.b, c.c};
    f.cmp = c.cmp;
    f.stored = c.stored;
    g.program.push_back(f);
    g.members.push_back(NodeId(k));
    if (c.stored) g.stored.push_back(NodeId(k));
  }
  g.root = g.members.back();
  for (std::size_t j = 0; j < e.forms.size(); ++j) {
    g.inputs.push_back(NodeId(1000 + j));
    if (e.flat) continue;
    FusedRead r;
    const char f = e.forms[j];
    r.inner = f == 'F' || f == 'B' ? 1 : 0;
    r.step = f == 'F' ? n : f == 'R' ? 1 : 0;
    r.lead_stride = {f == 'F' ? n : f == 'R' ? 1 : 0};
    g.reads.push_back(r);
  }
  g.compiled = i;
  return g;
}

bool compiled_by_default() {
  const char* env = std::getenv("GG_COMPILED");
  return !(env && std::string_view(env) == "0");
}

}  // namespace gg
