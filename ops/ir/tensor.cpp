// Tensor storage and the parameter store's initialization.
#include "ops/ir/tensor.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include <sys/mman.h>
#include <unistd.h>

namespace gg {

namespace {
// `bytes` rounded up to a multiple of `align`; std::bad_alloc where that would wrap around.
std::size_t round_up(std::size_t bytes, std::size_t align) {
  if (bytes > std::numeric_limits<std::size_t>::max() - (align - 1)) throw std::bad_alloc();
  return (bytes + align - 1) / align * align;
}
void* aligned_block(std::size_t bytes, std::size_t align) {
  void* p = std::aligned_alloc(align, round_up(bytes, align));
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* aligned_alloc64(std::size_t bytes) { return aligned_block(std::max<std::size_t>(bytes, 1), 64); }
void* aligned_alloc_large(std::size_t bytes) {
  constexpr std::size_t huge = std::size_t(2) << 20;
  if (bytes < huge) return aligned_alloc64(bytes);
  void* p = aligned_block(bytes, huge);
#ifdef MADV_HUGEPAGE
  madvise(p, round_up(bytes, huge), MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
#endif
  return p;
}
void aligned_free(void* p) { std::free(p); }
void Tensor::Free::operator()(void* p) const { aligned_free(p); }

Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  for (std::int64_t d : shape_)
    if (d < 0) throw GraphError(fmt::format("Tensor: negative dimension in shape {}", to_string(shape_)));
  std::size_t bytes = std::size_t(numel()) * 4;
  buf_.reset(aligned_alloc64(bytes));
  std::memset(buf_.get(), 0, bytes);
}

namespace {
void check_count(const char* what, const Shape& shape, std::size_t count) {
  if (std::int64_t(count) != numel(shape))
    throw GraphError(fmt::format("Tensor::{}: {} values for shape {}, which holds {}", what, count, to_string(shape),
                                 numel(shape)));
}
}  // namespace

Tensor Tensor::f32(Shape shape, std::span<const float> values) {
  check_count("f32", shape, values.size());
  Tensor t(std::move(shape), DType::f32);
  std::memcpy(t.data(), values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::i32(Shape shape, std::span<const std::int32_t> values) {
  check_count("i32", shape, values.size());
  Tensor t(std::move(shape), DType::i32);
  std::memcpy(t.data(), values.data(), values.size() * 4);
  return t;
}

Tensor::Tensor(const Tensor& o) : shape_(o.shape_), dtype_(o.dtype_) {
  if (o.buf_) {
    buf_.reset(aligned_alloc64(std::size_t(numel()) * 4));
    std::memcpy(buf_.get(), o.buf_.get(), std::size_t(numel()) * 4);
  }
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (this != &o) *this = Tensor(o);
  return *this;
}

Tensor& ParamStore::at(const std::string& name) {
  auto it = params_.find(name);
  if (it == params_.end()) throw GraphError(fmt::format("parameter '{}' is not in the store", name));
  return it->second;
}
const Tensor& ParamStore::at(const std::string& name) const {
  return const_cast<ParamStore*>(this)->at(name);
}

void ParamStore::init_missing(const Graph& g, std::uint64_t seed) {
  double bytes = 0;
  for (const Node& n : g.nodes())
    if (n.op == OpKind::param && !has(n.name)) bytes += double(numel(n.shape)) * 4;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && bytes > double(pages) * double(page))
    throw GraphError(fmt::format("the parameters need {:.1f} GiB, more than this machine's {:.1f} GiB of memory",
                                 bytes / double(1 << 30), double(pages) * double(page) / double(1 << 30)));
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::param || has(n.name)) continue;
    Tensor t(n.shape);
    std::mt19937_64 rng(seed ^ std::hash<std::string>{}(n.name));
    float* p = t.f();
    const Init& in = n.attrs.init;
    switch (in.kind) {
      case Init::zeros: break;
      case Init::ones: std::fill(p, p + t.numel(), 1.f); break;
      case Init::normal: {
        std::normal_distribution<float> d(in.a, in.b);
        for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
        break;
      }
      case Init::uniform: {
        std::uniform_real_distribution<float> d(in.a, in.b);
        for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
        break;
      }
    }
    params_.emplace(n.name, std::move(t));
  }
}

std::int64_t ParamStore::count() const {
  std::int64_t c = 0;
  for (auto& [k, t] : params_) c += t.numel();
  return c;
}

}  // namespace gg
