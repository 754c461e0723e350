// Fuzz target: io::parse_json_strict on arbitrary text. Every input must be refused with
// io::Error or parse to a value that dumps and parses back to itself (no nesting beyond
// the limit, no duplicate keys to lose on the way).
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "io/json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = gg::io::parse_json_strict(text, "fuzz.json", 16);
  } catch (const gg::io::Error& e) {
    if (std::string(e.what()).size() > 400) __builtin_trap();  // messages stay short
    return 0;
  }
  const std::string again = j.dump();
  if (gg::io::parse_json_strict(again, "dump", 16) != j) __builtin_trap();
  return 0;
}
