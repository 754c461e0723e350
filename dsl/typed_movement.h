// Movement: transpose, permute, reshape, slice and concat, over the typed handles of dsl/typed.h (which includes this file; include that).
#pragma once

#include "typed.h"

namespace gg::dsl::typed {

// --- Movement --------------------------------------------------------------------------------

// Axes A and B swapped (negative counts from the end). x: (..., M, N) -> (..., N, M) by default.
template <int A = -2, int B = -1, class... D>
auto transpose(const T<D...>& x, Loc loc = Loc::current()) {
  constexpr int r = int(sizeof...(D)), a = detail::axis_of(A, r), b = detail::axis_of(B, r);
  if constexpr (a < 0 || a >= r || b < 0 || b >= r) {
    shape_error<detail::say("transpose: axes {} and {} for rank {}", A, B, r)> error;
    return T<D...>(x);
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return T<detail::at<(int(I) == a ? b : int(I) == b ? a : int(I)), D...>...>(dsl::transpose(x, A, B, loc), loc);
    }(std::make_index_sequence<sizeof...(D)>{});
  }
}

// Axis i of the result is axis P[i] of x. x: (D...) -> (D[P]...)
template <int... P, class... D>
auto permute(const T<D...>& x, Loc loc = Loc::current()) {
  constexpr int r = int(sizeof...(D));
  constexpr int perm[] = {P..., 0};
  constexpr int bad = [&] {
    if (int(sizeof...(P)) != r) return -2;
    bool seen[sizeof...(P) + 1] = {};
    for (int i = 0; i < r; ++i) {
      if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]) return i;
      seen[perm[i]] = true;
    }
    return -1;
  }();
  if constexpr (bad == -2) {
    shape_error<detail::say("permute: {} axes for rank {}", sizeof...(P), r)> error;
    return x;
  } else if constexpr (bad >= 0) {
    shape_error<detail::say("permute: entry {} is {}, not a new axis below rank {}", bad, perm[bad], r)> error;
    return x;
  } else {
    return T<detail::at<std::size_t(P), D...>...>(dsl::permute(x, {P...}, loc), loc);
  }
}

// x[..., Begin:End, ...] along axis A (negative counts from the end), 0 <= Begin < End, End
// at most the axis's size when that is fixed (a run-time size is checked when the graph is
// built). x: (..., N, ...) -> (..., End - Begin, ...)
template <int A, std::int64_t Begin, std::int64_t End, class... D>
auto slice(const T<D...>& x, Loc loc = Loc::current()) {
  constexpr int r = int(sizeof...(D)), a = detail::axis_of(A, r);
  if constexpr (a < 0 || a >= r) {
    shape_error<detail::say("slice: axis {} for rank {}", A, r)> error;
    return x;
  } else if constexpr (Begin < 0 || End <= Begin) {
    shape_error<detail::say("slice: range [{}, {}) is empty or starts below 0", Begin, End)> error;
    return x;
  } else if constexpr (is_static<detail::at<std::size_t(a), D...>> && End > size_of<detail::at<std::size_t(a), D...>>()) {
    shape_error<detail::say("slice: range [{}, {}) outside a dimension of {}", Begin, End,
                            size_of<detail::at<std::size_t(a), D...>>())> error;
    return x;
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return T<std::conditional_t<int(I) == a, Dim<End - Begin>, detail::at<I, D...>>...>(
          dsl::slice(x, A, Begin, End, loc), loc);
    }(std::make_index_sequence<sizeof...(D)>{});
  }
}

namespace detail {
// The I-th dimension of a typed handle type.
template <std::size_t I, class X>
struct dim_at;
template <std::size_t I, class... D>
struct dim_at<I, T<D...>> {
  using type = at<I, D...>;
};

// The first axis on which two operands' fixed sizes differ (-1: none), and the two sizes.
struct mismatch {
  int axis = -1;
  std::int64_t x = 0, y = 0;
};

// One dimension that concatenated operands share: a fixed size wins over a run-time one,
// two run-time tags that differ give Any (the sizes are checked when the graph is built).
template <class... X>
struct shared_dim;
template <class X>
struct shared_dim<X> {
  using type = X;
};
template <class X, class Y, class... Rest>
struct shared_dim<X, Y, Rest...> {
  using type = typename shared_dim<std::conditional_t<is_static<X>, X,
                                                      std::conditional_t<is_static<Y>, Y,
                                                                         std::conditional_t<std::is_same_v<X, Y>, X, Any>>>,
                                   Rest...>::type;
};
// shared_dim of the I-th dimensions of Xs...
template <std::size_t I, class... Xs>
using shared_at = typename shared_dim<typename dim_at<I, Xs>::type...>::type;

// The type of concatenating First, Rest... along axis A (0 <= A < rank): Dim<Total> there
// when Fixed, else Any; shared_dim elsewhere.
template <int A, bool Fixed, std::int64_t Total, class First, class... Rest>
struct concatenated;
template <int A, bool Fixed, std::int64_t Total, class... D, class... Rest>
struct concatenated<A, Fixed, Total, T<D...>, Rest...> {
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>)
      -> T<std::conditional_t<int(I) == A, std::conditional_t<Fixed, Dim<(Fixed ? Total : 1)>, Any>,
                              shared_at<I, T<D...>, Rest...>>...>;
  using type = decltype(make(std::make_index_sequence<sizeof...(D)>{}));
};
}  // namespace detail

// The operands joined along axis A (negative counts from the end): the same rank, and the
// same size on every other axis. The result's axis A is the sum when every operand's is
// fixed, else Any. Its nodes are recorded at the latest operand's line (as an operator's;
// a variadic function cannot take a defaulted source location after its operands).
// xs: (..., N_i, ...) -> (..., sum N_i, ...)
template <int A, class... D, class... Rest>
auto concat(const T<D...>& first, const Rest&... rest) {
  constexpr int r = int(sizeof...(D)), a = detail::axis_of(A, r);
  constexpr int ranks[] = {r, Rest::rank...};
  // The first operand whose rank differs (0 = none), then the first other axis on which two
  // fixed sizes differ, with the sizes.
  constexpr int bad_rank = [&] {
    for (int k = 1; k <= int(sizeof...(Rest)); ++k)
      if (ranks[k] != r) return k;
    return 0;
  }();
  if constexpr (a < 0 || a >= r) {
    shape_error<detail::say("concat: axis {} for rank {}", A, r)> error;
    return first;
  } else if constexpr (bad_rank != 0) {
    shape_error<detail::say("concat: ranks differ ({} vs {})", r, ranks[bad_rank])> error;
    return first;
  } else {
    constexpr const std::int64_t* sizes[] = {T<D...>::sizes, Rest::sizes...};
    constexpr detail::mismatch bad = [&] {
      for (int i = 0; i < r; ++i) {
        if (i == a) continue;
        std::int64_t seen = -1;
        for (const std::int64_t* s : sizes) {
          if (s[i] < 0) continue;
          if (seen >= 0 && s[i] != seen) return detail::mismatch{i, seen, s[i]};
          seen = s[i];
        }
      }
      return detail::mismatch{};
    }();
    if constexpr (bad.axis >= 0) {
      shape_error<detail::say("concat: dimension {} differs ({} vs {})", bad.axis, bad.x, bad.y)> error;
      return first;
    } else {
      constexpr bool fixed = ((sizes[0][a] >= 0) && ... && (Rest::sizes[a] >= 0));
      constexpr std::int64_t total = (sizes[0][a] + ... + Rest::sizes[a]);
      Loc loc = first.loc();
      ((loc = detail::later(loc, rest.loc())), ...);
      using R = typename detail::concatenated<a, fixed, total, T<D...>, Rest...>::type;
      return R(dsl::concat({Expr(first), Expr(rest)...}, A, loc), loc);
    }
  }
}

// x viewed as To = T<E...>. Fixed sizes come from the type; a run-time dimension of To takes
// the size of the same tag in x (at most one other is inferred). When both have the same
// run-time tags, the fixed sizes must multiply to the same count (else a compile error).
template <class To, class... D>
To reshape(const T<D...>& x, Loc loc = Loc::current()) {
  return [&]<class... E>(std::type_identity<T<E...>>) {
    constexpr std::int64_t fixed_from = (std::int64_t(1) * ... * (is_static<D> ? size_of<D>() : 1));
    constexpr std::int64_t fixed_to = (std::int64_t(1) * ... * (is_static<E> ? size_of<E>() : 1));
    constexpr int found[] = {0, (is_static<E> ? 0 : detail::find_dim<E, D...>() >= 0 ? 1 : -1)...};
    constexpr int unknown = [&] {
      int n = 0;
      for (int f : found) n += f < 0;
      return n;
    }();
    constexpr int runtime_from = (0 + ... + !is_static<D>), runtime_to = (0 + ... + !is_static<E>);
    if constexpr (unknown > 1) {
      shape_error<detail::say("reshape: {} run-time dimensions to infer, at most 1", unknown)> error;
    } else if constexpr (unknown == 0 && runtime_from == runtime_to && fixed_from != fixed_to) {
      shape_error<detail::say("reshape: element counts differ ({} vs {})", fixed_from, fixed_to)> error;
    }
    Shape shape{[&] {
      if constexpr (is_static<E>) return size_of<E>();
      else if constexpr (detail::find_dim<E, D...>() >= 0) return x.dim(detail::find_dim<E, D...>());
      else return std::int64_t(-1);
    }()...};
    return To(dsl::reshape(x, std::move(shape), loc), loc);
  }(std::type_identity<To>{});
}

// Heads of a projected sequence: (B, S, C) -> (B, H, S, C/H); C must divide by H.
template <std::int64_t H, class B, class S, class C>
auto split_heads(const T<B, S, C>& x, Loc loc = Loc::current()) {
  if constexpr (is_static<C>) {
    if constexpr (size_of<C>() % H != 0) {
      shape_error<detail::say("split_heads: {} features do not split into {} heads", size_of<C>(), H)> error;
    }
    return T<B, Dim<H>, S, Dim<(size_of<C>() / H > 0 ? size_of<C>() / H : 1)>>(dsl::split_heads(x, H, loc), loc);
  } else {
    return T<B, Dim<H>, S, Any>(dsl::split_heads(x, H, loc), loc);
  }
}
// Its inverse: (B, H, S, hs) -> (B, S, H hs).
template <class B, class H, class S, class HS>
auto merge_heads(const T<B, H, S, HS>& x, Loc loc = Loc::current()) {
  return T<B, S, detail::product_dim<H, HS>>(dsl::merge_heads(x, loc), loc);
}

}  // namespace gg::dsl::typed
