// Owning tensors (64-byte aligned, row-major, f32 or i32) and the parameter store that
// parameters live in across runs and across graphs: a param node is bound by its name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "graph.h"

namespace gg {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled. Throws GraphError on a negative dimension.
  explicit Tensor(Shape shape, DType dtype = DType::f32);
  // `values` must hold numel(shape) entries; throws GraphError naming both counts otherwise.
  static Tensor f32(Shape shape, std::span<const float> values);
  static Tensor i32(Shape shape, std::span<const std::int32_t> values);
  // The same from a braced list: Tensor::f32({2, 2}, {1, 0, 0, 1}).
  static Tensor f32(Shape shape, std::initializer_list<float> values) {
    return f32(std::move(shape), std::span<const float>(values.begin(), values.size()));
  }
  static Tensor i32(Shape shape, std::initializer_list<std::int32_t> values) {
    return i32(std::move(shape), std::span<const std::int32_t>(values.begin(), values.size()));
  }

  Tensor(const Tensor& o);
  Tensor& operator=(const Tensor& o);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  std::int64_t numel() const { return gg::numel(shape_); }
  void* data() { return buf_.get(); }
  const void* data() const { return buf_.get(); }
  float* f() { return static_cast<float*>(data()); }
  const float* f() const { return static_cast<const float*>(data()); }
  std::int32_t* i() { return static_cast<std::int32_t*>(data()); }
  const std::int32_t* i() const { return static_cast<const std::int32_t*>(data()); }
  std::span<float> fspan() { return {f(), std::size_t(numel())}; }
  std::span<const float> fspan() const { return {f(), std::size_t(numel())}; }
  std::vector<float> to_vector() const { return {f(), f() + numel()}; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  Shape shape_;
  DType dtype_ = DType::f32;
  std::unique_ptr<void, Free> buf_;
};

// Memory aligned to 64 bytes, released with aligned_free.
void* aligned_alloc64(std::size_t bytes);
// The same for one large buffer walked over and over (an executor's arena): from 2 MB on it
// is aligned to 2 MB, its size rounded up to that, and the kernel is asked to back it with
// transparent huge pages (madvise; a no-op where the kernel has them always or never).
void* aligned_alloc_large(std::size_t bytes);
void aligned_free(void* p);

// Named parameter tensors, shared by every executor (and graph) that refers to them.
class ParamStore {
 public:
  bool has(const std::string& name) const { return params_.count(name) > 0; }
  Tensor& at(const std::string& name);
  const Tensor& at(const std::string& name) const;
  void set(const std::string& name, Tensor t) { params_[name] = std::move(t); }
  const std::map<std::string, Tensor>& all() const { return params_; }
  std::map<std::string, Tensor>& all() { return params_; }
  // Creates every parameter of `g` not yet in the store, from its Init, with a generator
  // seeded by `seed` and the parameter's name (so order of declaration does not matter).
  void init_missing(const Graph& g, std::uint64_t seed);
  std::int64_t count() const;  // total number of scalars

 private:
  std::map<std::string, Tensor> params_;
};

}  // namespace gg
