// Model config JSON (spec/reference-model.md): parsing with the validation the spec asks
// for (unknown, missing, mistyped and impossible keys are refused, naming the key), and
// the reverse, for checkpoints.
#pragma once

#include <stdexcept>
#include <string>

#include "../dsl/gpt.h"

namespace gg::train {

// The one error type for bad user input to training (config, data, weights, options):
// what() is one line naming the thing and the problem.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses a config JSON text; `source` names it in errors ("model.json: key 'n_head': ...").
dsl::GptConfig parse_config(const std::string& json_text, const std::string& source);
dsl::GptConfig load_config(const std::string& path);
// The config as the spec's JSON (all ten keys).
std::string config_to_json(const dsl::GptConfig& c);
// Checks the values of a config built in code (same messages as parsing).
void validate_config(const dsl::GptConfig& c, const std::string& source);

}  // namespace gg::train
