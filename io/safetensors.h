// safetensors files (the Hugging Face format): an 8-byte little-endian header length N,
// N bytes of UTF-8 JSON naming each tensor's dtype, shape and byte range, then the raw
// little-endian row-major data. Reading validates everything and refuses a bad file with
// one gg::io::Error naming the file and the problem, never a crash or a huge allocation.
// This is only the file format: it knows nothing of graphs, models or parameter names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "error.h"

namespace gg::io {

// The element types this project reads and writes. I64 is accepted for token tensors.
enum class DType { f32, i32, i64 };

// "F32", "I32", "I64": the spelling used in the file header.
std::string_view dtype_name(DType dtype);
// Bytes per element: 4, 4, 8.
std::size_t dtype_size(DType dtype);

// One tensor: dtype, shape (empty = scalar) and its little-endian row-major bytes.
// Invariant kept by the helpers and checked by the writer:
// data.size() == numel() * dtype_size(dtype).
struct Entry {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;

  // Product of the shape (1 for a scalar, 0 when any dimension is 0).
  // Requires: every dimension >= 0 and no overflow (throws Error otherwise).
  std::int64_t numel() const;

  // Builds an F32 / I32 tensor. Requires values.size() == product(shape), dims >= 0;
  // throws Error otherwise.
  static Entry from_f32(std::vector<std::int64_t> shape, const std::vector<float>& values);
  static Entry from_i32(std::vector<std::int64_t> shape, const std::vector<std::int32_t>& values);

  // The values, row-major. to_f32 requires dtype F32. to_i32 accepts I32, and I64 when
  // every value fits in 32 bits. Throws Error (naming the dtype or the offending value).
  std::vector<float> to_f32() const;
  std::vector<std::int32_t> to_i32() const;
};

// A whole file: string metadata and named tensors. After read_safetensors the tensors are
// in the order of their data in the file; write_safetensors chooses its own order.
struct File {
  std::string path;  // where it was read from (used in messages; empty when built in memory)
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Entry>> tensors;

  // The tensor called `name`, or nullptr.
  const Entry* find(std::string_view name) const;
  Entry* find(std::string_view name);
  // The tensor called `name`; throws Error "<path>: no tensor 'name'" when absent.
  const Entry& at(std::string_view name) const;

  // Adds a tensor. Requires a new, non-empty name other than "__metadata__" and a
  // consistent entry (see Entry); throws Error otherwise.
  void add(std::string name, Entry entry);
  void add_f32(std::string name, std::vector<std::int64_t> shape, const std::vector<float>& values);
  void add_i32(std::string name, std::vector<std::int64_t> shape,
               const std::vector<std::int32_t>& values);

  // The values of tensor `name` (as Entry::to_f32 / to_i32), errors naming file and tensor.
  std::vector<float> get_f32(std::string_view name) const;
  std::vector<std::int32_t> get_i32(std::string_view name) const;
};

// Reads and validates a whole file. Ensures: the header is a UTF-8 JSON object whose
// entries each hold exactly dtype (F32, I32 or I64), shape (non-negative integers) and
// data_offsets [begin, end] inside the data block, with end - begin == numel * itemsize,
// no two tensors overlapping, no duplicate names, and __metadata__ (if present) a
// string -> string map. Gaps between tensors are allowed. Throws Error otherwise.
// The header length is checked against the file size before anything is allocated.
// Refuses a path that is not a regular file (a FIFO without writer does not block).
File read_safetensors(const std::string& path);

// The same reader over the bytes of a whole file held in memory (for fuzzing and for
// callers that already hold the bytes); `name` becomes File::path and names it in messages.
File parse_safetensors(std::string_view bytes, const std::string& name);

// Writes `file` to path + ".tmp", fsyncs it and renames it over `path` (atomic: a reader
// sees the old file or the new one). The header is compact JSON with __metadata__ first
// (omitted when empty), padded with spaces to a multiple of 8 bytes as the HF library
// does; tensors are laid out contiguously, 8-byte types first, then by name, so equal
// contents give identical bytes and every tensor is aligned to its element size.
// Throws Error naming the path when an entry is inconsistent or the file cannot be written.
void write_safetensors(const std::string& path, const File& file);

}  // namespace gg::io
