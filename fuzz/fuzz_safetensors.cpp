// Fuzz target: io::parse_safetensors on arbitrary bytes (a whole file in memory). Every
// input must either be refused with io::Error or give a File whose tensors are
// consistent (bytes == numel * itemsize) and readable; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gg::io;
  File f;
  try {
    f = parse_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  for (const auto& [name, e] : f.tensors) {
    if (name.empty() || name == "__metadata__") __builtin_trap();
    if (e.data.size() != static_cast<std::uint64_t>(e.numel()) * dtype_size(e.dtype)) __builtin_trap();
    if (e.data.size() > size) __builtin_trap();
    try {
      if (e.dtype == DType::f32) {
        if (f.get_f32(name).size() != static_cast<std::size_t>(e.numel())) __builtin_trap();
      } else {
        f.get_i32(name);  // may refuse an I64 value that does not fit: an Error, fine
      }
    } catch (const Error&) {
    }
  }
  return 0;
}
