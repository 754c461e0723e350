// Small helpers the executor's planning passes share: arena block rounding and the
// leading-dims tests of batch-slice chains. Internal: not installed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/ir/shape.h"

namespace gg {

// Bytes rounded up to a cache line: the arena's and the chains' scratch blocks.
inline std::size_t round64(std::size_t b) { return (b + 63) / 64 * 64; }

inline bool starts_with(const Shape& s, const Shape& lead) {
  return s.size() > lead.size() && std::equal(lead.begin(), lead.end(), s.begin());
}

// Per L dim, the element stride of an input of shape `in` read by an output of rank `r`
// whose leading dims are L (0 where the input broadcasts); false if it cannot be sliced.
inline bool lead_strides(const Shape& in, std::size_t r, const Shape& lead, std::vector<std::int64_t>& stride) {
  stride.assign(lead.size(), 0);
  for (std::size_t d = 0; d < lead.size(); ++d) {
    const std::ptrdiff_t od = std::ptrdiff_t(d) - std::ptrdiff_t(r) + std::ptrdiff_t(in.size());
    const std::int64_t dim = od >= 0 ? in[std::size_t(od)] : 1;
    if (dim == 1) continue;
    if (dim != lead[d]) return false;
    std::int64_t inner = 1;
    for (std::size_t e = std::size_t(od) + 1; e < in.size(); ++e) inner *= in[e];
    stride[d] = inner;
  }
  return true;
}

}  // namespace gg
