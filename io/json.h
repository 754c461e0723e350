// Strict JSON for outside data (configs, checkpoint metadata, safetensors headers):
// duplicate keys are an error (not "the last one wins"), nesting is bounded (a value
// nested 100,000 deep is refused at depth max_depth, never a stack overflow), a NUL byte
// or a leading byte order mark is refused, and every message is one line with the
// offending text cut short. Linear time: no per-key rescans.
// Not here: what the values mean (the callers check that).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "error.h"
#include "message.h"

namespace gg::io {

// Parses `text` as one JSON value. `source` names it in messages (a path, or
// "path: header"). Requires max_depth >= 1 (objects and arrays nested at most this deep;
// scalars count as depth 0). Throws Error "<source> <problem>" on invalid JSON (with
// line and column), duplicate keys, nesting deeper than max_depth, a NUL byte or a BOM.
// Callers need <nlohmann/json.hpp> to use the result.
nlohmann::json parse_json_strict(const std::string& text, const std::string& source, int max_depth = 64);

}  // namespace gg::io
