// Shapes and dtypes: the static type of every graph node, inferred as the graph is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gg {

using Shape = std::vector<std::int64_t>;

enum class DType { f32, i32 };

// Number of elements (1 for a scalar of shape ()).
inline std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Row-major strides in elements.
inline Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (int i = int(s.size()) - 2; i >= 0; --i) st[std::size_t(i)] = st[std::size_t(i) + 1] * s[std::size_t(i) + 1];
  return st;
}

// "(2, 4, 8)"; a scalar is "()".
std::string to_string(const Shape& s);
const char* to_string(DType t);

}  // namespace gg
