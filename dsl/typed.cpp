// The non-template parts of dsl/typed.h: the run-time check of a typed handle's fixed
// dimensions, and where an operator on typed handles records its nodes.
#include "typed.h"

#include <fmt/format.h>

#include <cstring>

namespace gg::dsl::typed::detail {

Loc later(Loc a, Loc b) {
  if (std::strcmp(a.file_name(), b.file_name()) != 0) return a;
  return b.line() > a.line() ? b : a;
}

void check_dims(const char* what, Expr x, const std::int64_t* sizes, std::size_t rank, Loc loc) {
  const Node& n = x.node();  // throws GraphError if x is empty
  std::string want;
  for (std::size_t i = 0; i < rank; ++i) want += fmt::format("{}{}", i ? ", " : "", sizes[i] < 0 ? "*" : std::to_string(sizes[i]));
  want = "(" + want + ")";
  auto fail = [&](const std::string& problem) {
    throw GraphError(fmt::format("{} at {} ('{}'): shape {} but the type says {} (* = any size): {}", what,
                                 site_string(loc), n.name, to_string(n.shape),
                                 want, problem));
  };
  if (n.shape.size() != rank) fail(fmt::format("rank {}, not {}", n.shape.size(), rank));
  for (std::size_t i = 0; i < rank; ++i)
    if (sizes[i] >= 0 && n.shape[i] != sizes[i]) fail(fmt::format("dim {} is {}, not {}", i, n.shape[i], sizes[i]));
}

}  // namespace gg::dsl::typed::detail
