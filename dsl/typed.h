// Compile-time dimensions over the DSL: a typed handle T<Batch, Seq, Dim<64>> is an Expr
// whose rank and fixed dimensions are part of its type. Two fixed dimensions that disagree
// are a compile error whose first line names the op and both numbers:
//   error: 'gg::shape_error<gg::text{"matmul: inner dimensions differ (64 vs 48)"}> error' has incomplete type
// Dimensions known only at run time (Batch, Seq, or your own tag) keep the build-time
// check of the untyped DSL. Every typed op calls the untyped one (dsl/nn.h), so the graph
// is the same node for node (same ops, names, shapes, lines): autodiff, the trainer and the
// inspector see no difference. Not here: anything with a kernel or a gradient rule.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "nn.h"

namespace gg {

// The message of a compile-time shape error, carried in a type's name (g++ prints it).
struct text {
  char s[120] = {};
};

// Never defined: declaring one is the compile error, and its name is the message.
template <text Message>
struct shape_error;

}  // namespace gg

namespace gg::dsl::typed {

// A dimension fixed at compile time.
template <std::int64_t N>
struct Dim {
  static_assert(N > 0, "Dim<N>: a dimension is at least 1");
  static constexpr std::int64_t size = N;
};

// A dimension known only at run time: tag types derive from RunTime (struct Vocab : RunTime {}).
// Equal tags name the same size; reshape uses that to carry a run-time size across.
struct RunTime {};
struct Batch : RunTime {};
struct Seq : RunTime {};
struct Any : RunTime {};  // a run-time size of no particular name (e.g. after mixing Batch and Seq)

template <class D>
constexpr bool is_static = requires { D::size; };
template <class D>
concept Dimension = is_static<D> || std::is_base_of_v<RunTime, D>;

// The size of D, or -1 when it is known only at run time.
template <class D>
constexpr std::int64_t size_of() {
  if constexpr (is_static<D>) return D::size;
  else return -1;
}

template <Dimension... D>
class T;

namespace detail {

// "<fmt>" with each "{}" replaced by the next number: say("differ ({} vs {})", 64, 48);
// with `op`, "<op>: " comes first.
constexpr text say(const char* fmt, std::int64_t a = 0, std::int64_t b = 0, std::int64_t c = 0, const char* op = nullptr) {
  text t;
  int n = 0, used = 0;
  const std::int64_t args[3] = {a, b, c};
  for (const char* p = op; p && *p && n < 60; ++p) t.s[n++] = *p;
  if (op) t.s[n++] = ':', t.s[n++] = ' ';
  for (const char* p = fmt; *p && n < 110; ++p) {
    if (p[0] == '{' && p[1] == '}' && used < 3) {
      std::int64_t v = args[used++];
      if (v < 0) t.s[n++] = '-', v = -v;
      char digits[20];
      int k = 0;
      do digits[k++] = char('0' + v % 10), v /= 10;
      while (v);
      while (k) t.s[n++] = digits[--k];
      ++p;
    } else {
      t.s[n++] = *p;
    }
  }
  return t;
}

template <class... D>
struct list {};

// The I-th type of D...
template <std::size_t I, class... D>
using at = std::tuple_element_t<I, std::tuple<D...>>;

// list<D...> -> T<D...>
template <class L>
struct as_t;
template <class... D>
struct as_t<list<D...>> {
  using type = T<D...>;
};
template <class L>
using as_t_t = typename as_t<L>::type;

// list<D..., X...>
template <class L, class... X>
struct append;
template <class... D, class... X>
struct append<list<D...>, X...> {
  using type = list<D..., X...>;
};

// The first N of D..., as a list.
template <std::size_t N, class... D>
struct take {
  template <std::size_t... I>
  static auto pick(std::index_sequence<I...>) -> list<at<I, D...>...>;
  using type = decltype(pick(std::make_index_sequence<N>{}));
};

// list<D...> with Dim<1> in front until it has N entries (numpy's alignment from the right).
template <std::size_t N, class L, class = void>
struct pad;
template <std::size_t N, class... D>
struct pad<N, list<D...>, std::enable_if_t<(sizeof...(D) >= N)>> {
  using type = list<D...>;
};
template <std::size_t N, class... D>
struct pad<N, list<D...>, std::enable_if_t<(sizeof...(D) < N)>> {
  using type = typename pad<N, list<Dim<1>, D...>>::type;
};

// One dimension of a broadcast: equal, or one of them 1. A fixed size other than 1 wins over
// a run-time one (which must then be 1 or equal, checked when the graph is built).
template <class A, class B>
struct broadcast_dim {
  static constexpr std::int64_t a = size_of<A>(), b = size_of<B>();
  static constexpr bool ok = a < 0 || b < 0 || a == b || a == 1 || b == 1;
  using type = std::conditional_t<
      (a > 0 && b > 0), std::conditional_t<a == 1, B, A>,
      std::conditional_t<(a > 1), A,
                         std::conditional_t<(b > 1), B,
                                            std::conditional_t<a == 1, B,
                                                               std::conditional_t<b == 1 || std::is_same_v<A, B>, A, Any>>>>>;
};

template <class LA, class LB>
struct broadcast;
template <class... A, class... B>
struct broadcast<list<A...>, list<B...>> {
  static constexpr std::size_t n = sizeof...(A) > sizeof...(B) ? sizeof...(A) : sizeof...(B);
  template <class PA, class PB>
  struct zip;
  template <class... X, class... Y>
  struct zip<list<X...>, list<Y...>> {
    using type = list<typename broadcast_dim<X, Y>::type...>;
    static constexpr bool ok[] = {true, broadcast_dim<X, Y>::ok...};
    static constexpr std::int64_t xs[] = {0, size_of<X>()...}, ys[] = {0, size_of<Y>()...};
  };
  using z = zip<typename pad<n, list<A...>>::type, typename pad<n, list<B...>>::type>;
  using type = typename z::type;
  // The first pair that does not broadcast (1-based, 0 = none) and its sizes.
  static constexpr std::size_t bad = [] {
    for (std::size_t i = 1; i <= n; ++i)
      if (!z::ok[i]) return i;
    return std::size_t(0);
  }();
  static constexpr std::int64_t bad_a = z::xs[bad], bad_b = z::ys[bad];
};

// The product of two dimensions: fixed when both are.
template <class A, class B>
using product_dim = std::conditional_t<is_static<A> && is_static<B>, Dim<(size_of<A>() * size_of<B>() > 0 ? size_of<A>() * size_of<B>() : 1)>, Any>;

constexpr int axis_of(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

// The index of the first dimension of type D in Ds..., or -1.
template <class D, class... Ds>
constexpr int find_dim() {
  constexpr bool same[] = {false, std::is_same_v<D, Ds>...};
  for (int i = 1; i <= int(sizeof...(Ds)); ++i)
    if (same[i]) return i - 1;
  return -1;
}

// Where two operators' operands were made: the later line of the same file (an operator
// cannot take a source location, so its nodes are attributed to the nearer operand's line).
Loc later(Loc a, Loc b);

// Throws GraphError unless x has rank sizes.size() and each fixed size (>= 0) matches.
void check_dims(const char* what, Expr x, const std::int64_t* sizes, std::size_t rank, Loc loc);

}  // namespace detail

// A handle to a graph node whose rank and fixed dimensions are in its type. Cheap to copy;
// converts to Expr implicitly, and from Expr explicitly with a run-time check.
template <Dimension... D>
class T {
 public:
  static constexpr int rank = int(sizeof...(D));
  static constexpr std::int64_t sizes[sizeof...(D) + 1] = {size_of<D>()..., 0};  // -1: run-time

  // Throws GraphError (naming `loc`) unless x has this rank and these fixed dimensions.
  explicit T(Expr x, Loc loc = Loc::current()) : e_(x), loc_(loc) {
    detail::check_dims("T", x, sizes, sizeof...(D), loc);
  }
  operator Expr() const { return e_; }
  Expr expr() const { return e_; }
  Graph& graph() const { return (void)e_.node(), *e_.g; }  // throws GraphError if empty
  std::int64_t dim(int axis) const { return e_.dim(axis); }
  const Shape& shape() const { return e_.shape(); }
  const std::string& name() const { return e_.name(); }
  Loc loc() const { return loc_; }  // the line that made this handle

 private:
  Expr e_;
  Loc loc_;
};

// --- Leaves -----------------------------------------------------------------------------

namespace detail {
// The shape (D...) with run_time's sizes, in order, for its run-time dimensions; a
// GraphError from `what` at loc unless there is exactly one size for each.
template <Dimension... D>
Shape shape_of(Graph& g, const char* what, const std::string& name, const std::vector<std::int64_t>& run_time, Loc loc) {
  Shape shape;
  std::size_t next = 0;
  ((shape.push_back(is_static<D> ? size_of<D>() : next < run_time.size() ? run_time[next++] : -1)), ...);
  if (next != run_time.size() || std::find(shape.begin(), shape.end(), -1) != shape.end())
    fail_at_call(g, what, loc, "give one size for each run-time dimension of '" + name + "', in order");
  return shape;
}
}  // namespace detail

// An input of this type; `run_time` gives the run-time dimensions in order. x: (D...)
template <Dimension... D>
T<D...> input(Graph& g, const std::string& name, std::vector<std::int64_t> run_time = {}, DType dtype = DType::f32,
              Loc loc = Loc::current()) {
  Shape shape = detail::shape_of<D...>(g, "typed::input", name, run_time, loc);
  return T<D...>(dsl::input(g, name, std::move(shape), dtype, loc), loc);
}

// Noise of this type, drawn anew at each run (dsl::random_uniform, dsl::random_normal);
// `run_time` gives the run-time dimensions in order. (D...)
template <Dimension... D>
T<D...> random_uniform(Graph& g, std::vector<std::int64_t> run_time = {}, float lo = 0.f, float hi = 1.f,
                       Loc loc = Loc::current()) {
  Shape shape = detail::shape_of<D...>(g, "typed::random_uniform", "random_uniform", run_time, loc);
  return T<D...>(dsl::random_uniform(g, std::move(shape), lo, hi, loc), loc);
}
template <Dimension... D>
T<D...> random_normal(Graph& g, std::vector<std::int64_t> run_time = {}, Loc loc = Loc::current()) {
  Shape shape = detail::shape_of<D...>(g, "typed::random_normal", "random_normal", run_time, loc);
  return T<D...>(dsl::random_normal(g, std::move(shape), loc), loc);
}

// A parameter with fixed dimensions only. w: (D...)
template <Dimension... D>
T<D...> param(Graph& g, const std::string& name, Init init = {}, Loc loc = Loc::current()) {
  if constexpr (!(is_static<D> && ...)) {
    shape_error<detail::say("param: every dimension of a parameter is a Dim<N>")> error;
  }
  return T<D...>(dsl::param(g, name, {size_of<D>()...}, init, loc), loc);
}

// --- Element-wise, with broadcasting ------------------------------------------------------

namespace detail {
template <text Op, class... A, class... B>
auto elementwise(const T<A...>& a, const T<B...>& b) {
  using bc = broadcast<list<A...>, list<B...>>;
  if constexpr (bc::bad != 0) {
    shape_error<detail::say("dimensions differ ({} vs {})", bc::bad_a, bc::bad_b, 0, Op.s)> error;
  }
  return std::type_identity<as_t_t<typename bc::type>>{};
}
}  // namespace detail

#define GG_TYPED_BINARY(OP, NAME)                                                                         \
  template <class... A, class... B>                                                                     \
  auto operator OP(const T<A...>& a, const T<B...>& b) {                                               \
    using R = typename decltype(detail::elementwise<text{NAME}>(a, b))::type;    \
    const Loc loc = detail::later(a.loc(), b.loc());                                                    \
    return R(Expr(a) OP Operand(Expr(b), loc), loc);                                                    \
  }                                                                                                     \
  template <class... A>                                                                                 \
  T<A...> operator OP(const T<A...>& a, float b) {                                                     \
    return T<A...>(Expr(a) OP Operand(b, a.loc()), a.loc());                                           \
  }                                                                                                     \
  template <class... A>                                                                                 \
  T<A...> operator OP(float a, const T<A...>& b) {                                                     \
    return T<A...>(a OP Operand(Expr(b), b.loc()), b.loc());                                           \
  }
GG_TYPED_BINARY(+, "operator+")
GG_TYPED_BINARY(-, "operator-")
GG_TYPED_BINARY(*, "operator*")
GG_TYPED_BINARY(/, "operator/")
#undef GG_TYPED_BINARY

template <class... A>
T<A...> operator-(const T<A...>& a) {
  return T<A...>(-Operand(Expr(a), a.loc()), a.loc());
}

// The binary element-wise primitives of ops/ir/op_list.def, one each, broadcasting as the
// operators do: maximum(a, b), add(a, b), ...
#define GG_TYPED_leaf(name)
#define GG_TYPED_other(name)
#define GG_TYPED_unary(name)
#define GG_TYPED_binary(name)                                                           \
  template <class... A, class... B>                                                   \
  auto name(const T<A...>& a, const T<B...>& b, Loc loc = Loc::current()) {           \
    using R = typename decltype(detail::elementwise<text{#name}>(a, b))::type;        \
    return R(dsl::name(a, b, loc), loc);                                              \
  }
#define OP(name, arity, family) GG_TYPED_##family(name)
#include "../ops/ir/op_list.def"
#undef OP
#undef GG_TYPED_leaf
#undef GG_TYPED_other
#undef GG_TYPED_binary
#undef GG_TYPED_unary

// Unary element-wise ops and the shape-preserving composites: x: (D...) -> (D...).
// The unary primitives of ops/ir/op_list.def, one each: exp(x), tanh(x), ...
#define GG_TYPED_leaf(name)
#define GG_TYPED_other(name)
#define GG_TYPED_binary(name)
#define GG_TYPED_unary(name)                                     \
  template <class... D>                                          \
  T<D...> name(const T<D...>& x, Loc loc = Loc::current()) {     \
    return T<D...>(dsl::name(x, loc), loc);                      \
  }
#define OP(name, arity, family) GG_TYPED_##family(name)
#include "../ops/ir/op_list.def"
#undef OP
#undef GG_TYPED_leaf
#undef GG_TYPED_other
#undef GG_TYPED_binary
#undef GG_TYPED_unary
template <class... D>
T<D...> gelu(const T<D...>& x, GeluKind kind = GeluKind::erf, Loc loc = Loc::current()) {
  return T<D...>(dsl::gelu(x, kind, loc), loc);
}
template <class... D>
T<D...> silu(const T<D...>& x, Loc loc = Loc::current()) {
  return T<D...>(dsl::silu(x, loc), loc);
}
template <class... D>
T<D...> dropout(const T<D...>& x, float p, bool training, Loc loc = Loc::current()) {
  return T<D...>(dsl::dropout(x, p, training, loc), loc);
}
// Softmax over the last axis (the max trick). x: (..., N) -> (..., N)
template <class... D>
T<D...> softmax(const T<D...>& x, Loc loc = Loc::current()) { return T<D...>(dsl::softmax(x, -1, loc), loc); }
template <class... D>
T<D...> log_softmax(const T<D...>& x, Loc loc = Loc::current()) {
  return T<D...>(dsl::log_softmax(x, -1, loc), loc);
}
// Over the last axis, params "<name>.weight" and "<name>.bias". x: (..., C) -> (..., C)
template <class... D>
T<D...> layer_norm(const T<D...>& x, const std::string& name, float eps = 1e-5f, bool bias = true,
                   Loc loc = Loc::current()) {
  return T<D...>(dsl::layer_norm(x, name, eps, bias, loc), loc);
}
// RMSNorm over the last axis, param "<name>.weight". x: (..., C) -> (..., C)
template <class... D>
T<D...> rms_norm(const T<D...>& x, const std::string& name, float eps = 1e-6f, Loc loc = Loc::current()) {
  return T<D...>(dsl::rms_norm(x, name, eps, loc), loc);
}

// To a scalar T<>.
template <class... D>
T<> mean_all(const T<D...>& x, Loc loc = Loc::current()) { return T<>(dsl::mean_all(x, loc), loc); }
template <class... D>
T<> sum_all(const T<D...>& x, Loc loc = Loc::current()) { return T<>(dsl::sum_all(x, loc), loc); }

namespace detail {
// Done... followed by list Rest... without its I-th entry.
template <std::size_t I, class Done, class Rest>
struct drop;
template <std::size_t I, class... Done, class X, class... Rest>
struct drop<I, list<Done...>, list<X, Rest...>> {
  using type = typename drop<I - 1, list<Done..., X>, list<Rest...>>::type;
};
template <class... Done, class X, class... Rest>
struct drop<0, list<Done...>, list<X, Rest...>> {
  using type = list<Done..., Rest...>;
};

// T<D...> reduced over axis A (0 <= A < rank): the axis dropped, or Dim<1> in its place
// with Keepdim.
template <int A, bool Keepdim, class... D>
struct reduced {
  template <std::size_t... I>
  static auto kept(std::index_sequence<I...>) -> T<std::conditional_t<int(I) == A, Dim<1>, at<I, D...>>...>;
  using type = std::conditional_t<Keepdim, decltype(kept(std::make_index_sequence<sizeof...(D)>{})),
                                  as_t_t<typename drop<std::size_t(A), list<>, list<D...>>::type>>;
};
}  // namespace detail

// Sum, mean and max over axis A (negative counts from the end), the axis dropped or, with
// Keepdim, kept as Dim<1>: sum<1>(x), mean<-1, true>(x). x: (..., N, ...) -> (..., ...)
#define GG_TYPED_REDUCTION(NAME)                                                                 \
  template <int A, bool Keepdim = false, class... D>                                             \
  auto NAME(const T<D...>& x, Loc loc = Loc::current()) {                                        \
    constexpr int r = int(sizeof...(D)), a = detail::axis_of(A, r);                              \
    if constexpr (a < 0 || a >= r) {                                                             \
      shape_error<detail::say("axis {} for rank {}", A, r, 0, #NAME)> error;                     \
      return x;                                                                                  \
    } else {                                                                                     \
      using R = typename detail::reduced<a, Keepdim, D...>::type;                                \
      return R(dsl::NAME(x, A, Keepdim, loc), loc);                                              \
    }                                                                                            \
  }
GG_TYPED_REDUCTION(sum)
GG_TYPED_REDUCTION(mean)
GG_TYPED_REDUCTION(max)
#undef GG_TYPED_REDUCTION

// --- Linear algebra ------------------------------------------------------------------------

// Batched matmul: (batch_a..., M, K) @ (batch_b..., K, N) -> (broadcast batch..., M, N).
template <class... A, class... B>
auto matmul(const T<A...>& a, const T<B...>& b, Loc loc = Loc::current()) {
  constexpr std::size_t ra = sizeof...(A), rb = sizeof...(B);
  if constexpr (ra < 2 || rb < 2) {
    shape_error<detail::say("matmul: operands need rank 2 or more (got {} and {})", ra, rb)> error;
    return T<>(Expr{}, loc);
  } else {
    using K1 = detail::at<ra - 1, A...>;
    using K2 = detail::at<rb - 2, B...>;
    if constexpr (is_static<K1> && is_static<K2> && size_of<K1>() != size_of<K2>()) {
      shape_error<detail::say("matmul: inner dimensions differ ({} vs {})", size_of<K1>(), size_of<K2>())> error;
    }
    using bc = detail::broadcast<typename detail::take<ra - 2, A...>::type, typename detail::take<rb - 2, B...>::type>;
    if constexpr (bc::bad != 0) {
      shape_error<detail::say("matmul: batch dimensions differ ({} vs {})", bc::bad_a, bc::bad_b)> error;
    }
    using R = typename detail::append<typename bc::type, detail::at<ra - 2, A...>, detail::at<rb - 1, B...>>::type;
    return detail::as_t_t<R>(dsl::matmul(a, b, false, false, loc), loc);
  }
}

// y = x @ W^T + b with W: (Out, In), b: (Out), named "<name>.weight", "<name>.bias".
// x: (..., In) -> (..., Out)
template <std::int64_t Out, class... D>
auto linear(const T<D...>& x, const std::string& name, bool bias = true, std::optional<Init> w_init = {},
            Loc loc = Loc::current()) {
  static_assert(sizeof...(D) >= 1, "linear: x needs rank 1 or more");
  using R = typename detail::append<typename detail::take<sizeof...(D) - 1, D...>::type, Dim<Out>>::type;
  return detail::as_t_t<R>(dsl::linear(x, Out, name, bias, w_init, loc), loc);
}

}  // namespace gg::dsl::typed

// Movement (transpose, permute, reshape, slice, concat, ...) and the layers (attention,
// embeddings, losses) over typed handles.
#include "typed_movement.h"
#include "typed_layers.h"
