// A strict JSON object read into plain values, for callers outside io that must not depend
// on a JSON library (option files): the same strict reading as every outside file
// (duplicate keys, nesting depth, a NUL byte or a byte order mark refused), each member's
// value a scalar, or for anything else its JSON text. What the values mean is the caller's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "error.h"

namespace gg::io {

// One member of a JSON object.
struct JsonMember {
  std::string key;
  // A boolean, an integer (std::uint64_t only above INT64_MAX), any other number, a string;
  // std::monostate for null, an array or an object.
  std::variant<std::monostate, bool, std::int64_t, std::uint64_t, double, std::string> value;
  std::string json;  // for null, an array or an object: its compact JSON text; else empty
};

// Parses `text` as one JSON value; `source` names it in messages (a path). Requires
// max_depth >= 1. Returns the members of the object, sorted by key, or std::nullopt when
// the text is valid JSON but not an object. Throws Error "<source> <problem>" on invalid
// JSON (with line and column), duplicate keys, nesting deeper than max_depth, a NUL byte
// or a BOM.
std::optional<std::vector<JsonMember>> parse_json_object(const std::string& text, const std::string& source,
                                                         int max_depth = 64);

}  // namespace gg::io
