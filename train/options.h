// Option tables: the options of a model or a run described once, each with its name, type,
// default (the struct's own initializer), help and check. From that one description come
// JSON reading and writing, validation with one-line errors naming the key, command-line
// flags (the CLI walks the table) and checkpoint metadata. Adding an option is one line in
// the table plus its use.
//
//   struct MlpOptions {
//     std::int64_t hidden = 64;
//     double dropout = 0.0;
//     static const OptionTable<MlpOptions>& table() {
//       static const OptionTable<MlpOptions> t{{
//           opt("hidden", &MlpOptions::hidden, "Hidden width").at_least(1),
//           opt("dropout", &MlpOptions::dropout, "Dropout rate").at_least(0).below(1)}};
//       return t;
//     }
//   };
//
// Not here: parsing argv (cli/ binds each option to a flag), nested options. A list-valued
// option (std::vector<std::string>) is a command-line flag only: its text is comma-separated,
// and a JSON file cannot set it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "error.h"

namespace gg::train {

// An option's value, whatever its C++ type: choices travel as their names.
using OptionValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

// One option, type-erased: accessors take the options struct as void*.
struct Option {
  enum class Kind { boolean, integer, number, text, choice, list };
  // What a text option names, for the command line to check before any work: a file to read
  // (it must exist and be a regular file), a file to write (its directory must exist).
  enum class Path { none, input, output };
  std::string name, help;
  Kind kind = Kind::text;
  std::vector<std::string> choices;  // Kind::choice: the allowed names
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;  // (lo, ...) or [lo, ...)
  bool optional_in_json = false;          // a JSON config may leave it out (it keeps its default)
  bool required = false;                  // the command line must give it
  Path path = Path::none;
  std::string bare;                       // the text of a flag given alone or empty ("--grad"); "" = it takes a value
  std::function<OptionValue(const void*)> get;
  std::function<void(void*, const OptionValue&)> set;  // the value is already checked

  // Range checks (integers and numbers); chainable in a table.
  Option&& at_least(double v) && { lo = v, lo_open = false; return std::move(*this); }
  Option&& above(double v) && { lo = v, lo_open = true; return std::move(*this); }
  Option&& at_most(double v) && { hi = v, hi_open = false; return std::move(*this); }
  Option&& below(double v) && { hi = v, hi_open = true; return std::move(*this); }
  // Marks an option that JSON configs may omit (the reference model's spec fixes its keys).
  Option&& optional() && { optional_in_json = true; return std::move(*this); }
  // Command-line roles: a flag that must be given, a path read or written, the text of a
  // flag given without a value.
  Option&& must_give() && { required = true; return std::move(*this); }
  Option&& reads_file() && { path = Path::input; return std::move(*this); }
  Option&& writes_file() && { path = Path::output; return std::move(*this); }
  Option&& alone_means(std::string text) && { bare = std::move(text); return std::move(*this); }

  // "an integer >= 1", "a number in [0, 1)", "true or false", "one of erf, tanh".
  std::string describe() const;
  // Checks `v` against kind and range; returns "" or the problem ("must be >= 1, got 0").
  std::string problem(const OptionValue& v) const;
  // Parses command-line text into a value of this kind; throws InputError naming `--flag`.
  OptionValue parse_text(const std::string& text) const;
};

// The text of a value ("4", "0.001", "true", "learned").
std::string to_text(const OptionValue& v);

// The double whose shortest text equals `x`'s (a float 1e-5 reads as 1e-05, not 9.99999974e-06).
double shortest_double(float x);
inline double shortest_double(double x) { return x; }

// Builders, deducing the kind from the member's type.
template <class S, class T>
Option opt(std::string name, T S::*member, std::string help) {
  Option o;
  o.name = std::move(name);
  o.help = std::move(help);
  if constexpr (std::is_same_v<T, bool>) {
    o.kind = Option::Kind::boolean;
    o.bare = "true";  // "--resume" alone
    o.get = [member](const void* s) -> OptionValue { return static_cast<const S*>(s)->*member; };
    o.set = [member](void* s, const OptionValue& v) { static_cast<S*>(s)->*member = std::get<bool>(v); };
  } else if constexpr (std::is_integral_v<T>) {
    o.kind = Option::Kind::integer;
    // Kept within +-9e15, where every integer is exact as a double (the range checks use doubles).
    o.lo = std::is_signed_v<T> ? std::max(double(std::numeric_limits<T>::min()), -9.0e15) : 0.0;
    o.hi = std::min(double(std::numeric_limits<T>::max()), 9.0e15);
    o.get = [member](const void* s) -> OptionValue { return std::int64_t(static_cast<const S*>(s)->*member); };
    o.set = [member](void* s, const OptionValue& v) { static_cast<S*>(s)->*member = T(std::get<std::int64_t>(v)); };
  } else if constexpr (std::is_floating_point_v<T>) {
    o.kind = Option::Kind::number;
    o.lo = -double(std::numeric_limits<T>::max());
    o.hi = double(std::numeric_limits<T>::max());
    o.get = [member](const void* s) -> OptionValue { return shortest_double(static_cast<const S*>(s)->*member); };
    o.set = [member](void* s, const OptionValue& v) { static_cast<S*>(s)->*member = T(std::get<double>(v)); };
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    o.kind = Option::Kind::list;
    o.get = [member](const void* s) -> OptionValue { return static_cast<const S*>(s)->*member; };
    o.set = [member](void* s, const OptionValue& v) { static_cast<S*>(s)->*member = std::get<std::vector<std::string>>(v); };
  } else {
    static_assert(std::is_same_v<T, std::string>,
                  "options are bool, integers, floating point, std::string or std::vector<std::string>");
    o.kind = Option::Kind::text;
    o.get = [member](const void* s) -> OptionValue { return static_cast<const S*>(s)->*member; };
    o.set = [member](void* s, const OptionValue& v) { static_cast<S*>(s)->*member = std::get<std::string>(v); };
  }
  return o;
}

// An option stored as an enum (or any type), read and written by name.
template <class S, class T>
Option choice(std::string name, T S::*member, std::vector<std::pair<std::string, T>> names, std::string help) {
  Option o;
  o.name = std::move(name);
  o.help = std::move(help);
  o.kind = Option::Kind::choice;
  for (auto& [n, v] : names) o.choices.push_back(n);
  o.get = [member, names](const void* s) -> OptionValue {
    for (auto& [n, v] : names)
      if (v == static_cast<const S*>(s)->*member) return n;
    // A value that is none of the choices: a text member shows itself (so the check names
    // it), another type its value's absence.
    if constexpr (std::is_convertible_v<T, std::string>) return std::string(static_cast<const S*>(s)->*member);
    else return std::string("(not one of the choices)");
  };
  o.set = [member, names](void* s, const OptionValue& v) {
    for (auto& [n, val] : names)
      if (n == std::get<std::string>(v)) static_cast<S*>(s)->*member = val;
  };
  return o;
}

// The options of one struct, in order, and an optional check across options
// ("n_embd must be divisible by n_head"): it returns {key, problem} or {} when all is well.
class OptionList {
 public:
  OptionList(std::vector<Option> options, std::function<std::pair<std::string, std::string>(const void*)> check = {});
  const std::vector<Option>& options() const { return options_; }
  const Option* find(const std::string& name) const;

  // Every option's value checked, then the cross check; throws InputError
  // "<source>: key '<name>': <problem>", or with `as_flags` (values from the command line)
  // "--<name-with-dashes>: <problem>".
  void validate(const void* s, const std::string& source, bool as_flags = false) const;
  // One JSON object {"name": value, ...} of every option.
  std::string to_json(const void* s) const;

 private:
  std::vector<Option> options_;
  std::function<std::pair<std::string, std::string>(const void*)> check_;
};

// A list bound to its struct type.
template <class S>
class OptionTable : public OptionList {
 public:
  using Check = std::function<std::pair<std::string, std::string>(const S&)>;
  OptionTable(std::vector<Option> options, Check check = {})
      : OptionList(std::move(options), check ? std::function<std::pair<std::string, std::string>(const void*)>(
                                                   [check](const void* s) { return check(*static_cast<const S*>(s)); })
                                             : nullptr) {}
};

// One options struct and its table: what JSON reading and flag parsing fill in.
struct BoundOptions {
  const OptionList* list;
  void* target;
};
template <class S>
BoundOptions bind(S& s) {
  return {&S::table(), &s};
}

// Reads a JSON object whose keys are the options of `sets` (a key belongs to the first set
// that has it). Unknown keys (with the closest known names), duplicate keys, mistyped or
// out-of-range values and, with require_all, missing keys (except optional ones) are
// refused with one line naming `source` and the key. Validates every set afterwards.
void read_json(const std::string& text, const std::string& source, std::initializer_list<BoundOptions> sets,
               bool require_all = false);
void read_json(const std::string& text, const std::string& source, const std::vector<BoundOptions>& sets,
               bool require_all = false);

// The same from a file: a regular file of at most 16 MiB (a FIFO, a directory, /dev/zero
// or a huge file is refused with one line, never read without bound).
void read_json_file(const std::string& path, const std::vector<BoundOptions>& sets, bool require_all = false);
// The same for a command that takes some of the tables' options from elsewhere (the data,
// the task): a key among `derived` is refused, naming it and saying `why`, rather than
// silently having no effect.
void read_json_file(const std::string& path, const std::vector<BoundOptions>& sets,
                    const std::vector<std::string>& derived, const std::string& why);

// Sets option `name` of the first set that has it from command-line text; throws
// InputError naming `--name-with-dashes` for a bad value, and for an unknown name.
void set_from_text(const std::vector<BoundOptions>& sets, const std::string& name, const std::string& text);

// "n_layer" -> "--n-layer".
std::string flag_name(const std::string& option_name);

// The closest of `known` to `name` by edit distance, or "" when none is close.
std::string closest(const std::string& name, const std::vector<std::string>& known);

}  // namespace gg::train
