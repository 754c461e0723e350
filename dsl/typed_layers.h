// Layers: attention, embeddings and losses, over the typed handles of dsl/typed.h (which includes this file; include that).
#pragma once

#include "typed.h"

namespace gg::dsl::typed {

// --- Attention ---------------------------------------------------------------------------------

template <class Out, class Weights>
struct Attention {
  Out out;          // (..., Tq, hv)
  Weights weights;  // (..., Tq, Tk), rows sum to 1
};

// softmax(q k^T * hs^-0.5 [masked]) [dropout] @ v, as dsl::attention (the mask in opt stays
// untyped). q: (..., Tq, hs), k: (..., Tk, hs), v: (..., Tk, hv) -> out (..., Tq, hv), weights (..., Tq, Tk)
template <class... Q, class... K, class... V>
auto attention(const T<Q...>& q, const T<K...>& k, const T<V...>& v, const AttentionOptions& opt = {},
               Loc loc = Loc::current()) {
  constexpr std::size_t rq = sizeof...(Q), rk = sizeof...(K), rv = sizeof...(V);
  static_assert(rq >= 2 && rk >= 2 && rv >= 2, "attention: q, k and v need rank 2 or more");
  using HQ = detail::at<rq - 1, Q...>;
  using HK = detail::at<rk - 1, K...>;
  using TK = detail::at<rk - 2, K...>;
  using TV = detail::at<rv - 2, V...>;
  if constexpr (is_static<HQ> && is_static<HK> && size_of<HQ>() != size_of<HK>()) {
    shape_error<detail::say("attention: query and key sizes differ ({} vs {})", size_of<HQ>(), size_of<HK>())> error;
  }
  if constexpr (is_static<TK> && is_static<TV> && size_of<TK>() != size_of<TV>()) {
    shape_error<detail::say("attention: keys and values differ in length ({} vs {})", size_of<TK>(), size_of<TV>())> error;
  }
  using qk = detail::broadcast<typename detail::take<rq - 2, Q...>::type, typename detail::take<rk - 2, K...>::type>;
  using bc = detail::broadcast<typename qk::type, typename detail::take<rv - 2, V...>::type>;
  if constexpr (qk::bad != 0) {
    shape_error<detail::say("attention: batch dimensions of query and key differ ({} vs {})", qk::bad_a, qk::bad_b)> error;
  } else if constexpr (bc::bad != 0) {
    shape_error<detail::say("attention: batch dimensions of value differ ({} vs {})", bc::bad_a, bc::bad_b)> error;
  }
  using TQ = detail::at<rq - 2, Q...>;
  using HV = detail::at<rv - 1, V...>;
  return [&]<class... X>(detail::list<X...>) {
    AttentionResult r = dsl::attention(q, k, v, opt, loc);
    return Attention<T<X..., TQ, HV>, T<X..., TQ, TK>>{T<X..., TQ, HV>(r.out, loc), T<X..., TQ, TK>(r.weights, loc)};
  }(typename bc::type{});
}

// Multi-head self-attention as dsl::multi_head_attention with H heads (C must divide by H):
// x: (B, S, C) -> out (B, S, C), weights (B, H, S, S).
template <std::int64_t H, class B, class S, class C>
auto multi_head_attention(const T<B, S, C>& x, const std::string& name, bool bias = true,
                          const AttentionOptions& opt = {}, std::optional<Init> proj_init = {},
                          Loc loc = Loc::current()) {
  if constexpr (is_static<C> && size_of<C>() % H != 0) {
    shape_error<detail::say("multi_head_attention: {} features do not split into {} heads", size_of<C>(), H)> error;
  }
  AttentionResult r = dsl::multi_head_attention(x, H, name, bias, opt, proj_init, loc);
  return Attention<T<B, S, C>, T<B, Dim<H>, S, S>>{T<B, S, C>(r.out, loc), T<B, Dim<H>, S, S>(r.weights, loc)};
}

// Rotary positions as dsl::rotary_embedding over the last two axes (..., S, Hs): Hs even.
template <class... D>
T<D...> rotary_embedding(const T<D...>& x, std::int64_t start = 0, float base = 10000.f, Loc loc = Loc::current()) {
  using Hs = std::tuple_element_t<sizeof...(D) - 1, std::tuple<D...>>;
  if constexpr (is_static<Hs> && size_of<Hs>() % 2 != 0) {
    shape_error<detail::say("rotary_embedding: a head size of {} is odd (pairs of features rotate)", size_of<Hs>())> error;
  }
  return T<D...>(dsl::rotary_embedding(x, start, base, loc), loc);
}

// Grouped-query self-attention as dsl::grouped_query_attention with H query heads and Hkv
// key/value heads (C must divide by H, H by Hkv; opt.n_head and opt.n_kv_head are set):
// x: (B, S, C) -> out (B, S, C), weights (B, H, S, S).
template <std::int64_t H, std::int64_t Hkv, class B, class S, class C>
auto grouped_query_attention(const T<B, S, C>& x, const std::string& name, GroupedQueryOptions opt = {},
                             Loc loc = Loc::current()) {
  if constexpr (H % Hkv != 0) {
    shape_error<detail::say("grouped_query_attention: {} query heads do not share {} key/value heads evenly", H, Hkv)> error;
  } else if constexpr (is_static<C> && size_of<C>() % H != 0) {
    shape_error<detail::say("grouped_query_attention: {} features do not split into {} heads", size_of<C>(), H)> error;
  }
  opt.n_head = H;
  opt.n_kv_head = Hkv;
  AttentionResult r = dsl::grouped_query_attention(x, name, opt, loc);
  return Attention<T<B, S, C>, T<B, Dim<H>, S, S>>{T<B, S, C>(r.out, loc), T<B, Dim<H>, S, S>(r.weights, loc)};
}

// The pre-LN block of dsl::transformer_block with H heads (opt.n_head is set to H):
// x: (B, S, C) -> (B, S, C), C divisible by H.
template <std::int64_t H, class B, class S, class C>
T<B, S, C> transformer_block(const T<B, S, C>& x, const std::string& name, BlockOptions opt = {},
                             Loc loc = Loc::current()) {
  if constexpr (is_static<C> && size_of<C>() % H != 0) {
    shape_error<detail::say("transformer_block: {} features do not split into {} heads", size_of<C>(), H)> error;
  }
  opt.n_head = H;
  return T<B, S, C>(dsl::transformer_block(x, name, opt, loc), loc);
}

// --- Embeddings and losses ---------------------------------------------------------------------

// Table "<name>.weight" (Num, Out); ids: (D...) i32 -> (D..., Out).
template <std::int64_t Num, std::int64_t Out, class... D>
T<D..., Dim<Out>> embedding(const T<D...>& ids, const std::string& name, Loc loc = Loc::current()) {
  return T<D..., Dim<Out>>(dsl::embedding(ids, Num, Out, name, loc), loc);
}

// Mean cross-entropy of logits (D..., V) against i32 targets (D...) -> scalar.
template <class... D, class... E>
T<> cross_entropy(const T<D...>& logits, const T<E...>& targets, int ignore_index = -1,
                  Loc loc = Loc::current()) {
  if constexpr (sizeof...(D) != sizeof...(E) + 1) {
    shape_error<detail::say("cross_entropy: logits of rank {} need targets of rank {}", sizeof...(D), sizeof...(D) - 1)> error;
  }
  return T<>(dsl::cross_entropy(logits, targets, ignore_index, loc), loc);
}

}  // namespace gg::dsl::typed
