// Model config JSON (spec/reference-model.md): parsing with the validation the spec asks
// for (unknown, missing, mistyped and impossible keys are refused, naming the key), and
// the reverse, for checkpoints.
#pragma once

#include <stdexcept>
#include <string>

#include "dsl/gpt.h"
#include "train/input_error.h"  // InputError

namespace gg::train {

// Parses a config JSON text; `source` names it in errors ("model.json: key 'n_head': ...").
dsl::GptConfig parse_config(const std::string& json_text, const std::string& source);
dsl::GptConfig load_config(const std::string& path);
// The config as the spec's JSON (all ten keys).
std::string config_to_json(const dsl::GptConfig& c);
// Checks the values of a config built in code (same messages as parsing).
void validate_config(const dsl::GptConfig& c, const std::string& source);

}  // namespace gg::train
