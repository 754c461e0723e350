// Option tables: checking values, JSON in and out, command-line text.
#include "train/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/json_object.h"
#include "io/message.h"
#include "io/read_file.h"
#include "ops/ir/graph.h"

namespace gg::train {

using nlohmann::json;

namespace {
// A value echoed in a message: cut short, on one line.
std::string cut(const std::string& s, std::size_t max = 60) { return io::cut(s, max); }
std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", std::int64_t(v));
  return fmt::format("{}", v);
}
}  // namespace

double shortest_double(float x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  double d = x;
  std::from_chars(buf, end, d);
  return d;
}

std::string to_text(const OptionValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>) return x;
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) return fmt::format("{}", fmt::join(x, ","));
        else return fmt::format("{}", x);
      },
      v);
}

std::string Option::describe() const {
  switch (kind) {
    case Kind::boolean: return "true or false";
    case Kind::text: return "a string";
    case Kind::list: return "comma-separated names";
    case Kind::choice: return fmt::format("one of {}", fmt::join(choices, ", "));
    default: break;
  }
  const bool has_lo = std::isfinite(lo) && lo > -9.0e15, has_hi = std::isfinite(hi) && hi < 9.0e15 && hi < 1e30;
  const std::string what = kind == Kind::integer ? "an integer" : "a number";
  if (has_lo && has_hi)
    return fmt::format("{} in {}{}, {}{}", what, lo_open ? "(" : "[", number_text(lo), number_text(hi), hi_open ? ")" : "]");
  if (has_lo) return fmt::format("{} {} {}", what, lo_open ? ">" : ">=", number_text(lo));
  if (has_hi) return fmt::format("{} {} {}", what, hi_open ? "<" : "<=", number_text(hi));
  return what;
}

std::string Option::problem(const OptionValue& v) const {
  auto must = [&](const std::string& got) { return fmt::format("must be {}, got {}", describe(), cut(got)); };
  switch (kind) {
    case Kind::boolean:
      return std::holds_alternative<bool>(v) ? "" : must(to_text(v));
    case Kind::text:
      return std::holds_alternative<std::string>(v) ? "" : must(to_text(v));
    case Kind::list:
      return std::holds_alternative<std::vector<std::string>>(v) ? "" : must(to_text(v));
    case Kind::choice: {
      if (!std::holds_alternative<std::string>(v)) return must(to_text(v));
      for (auto& c : choices)
        if (c == std::get<std::string>(v)) return "";
      return must(fmt::format("'{}'", std::get<std::string>(v)));
    }
    case Kind::integer:
    case Kind::number: {
      double x;
      if (kind == Kind::integer) {
        if (!std::holds_alternative<std::int64_t>(v)) return must(to_text(v));
        x = double(std::get<std::int64_t>(v));
      } else {
        if (std::holds_alternative<std::int64_t>(v)) x = double(std::get<std::int64_t>(v));
        else if (std::holds_alternative<double>(v)) x = std::get<double>(v);
        else return must(to_text(v));
        if (!std::isfinite(x)) return must(to_text(v));
      }
      const bool low = lo_open ? !(x > lo) : !(x >= lo), high = hi_open ? !(x < hi) : !(x <= hi);
      return low || high ? must(to_text(v)) : "";
    }
  }
  return "";
}

OptionValue Option::parse_text(const std::string& text) const {
  auto bad = [&] {
    return InputError(fmt::format("{}: must be {}, got '{}'", flag_name(name), describe(), cut(text)));
  };
  OptionValue v;
  switch (kind) {
    case Kind::boolean:
      if (text == "true" || text == "1" || text == "on" || text == "yes") v = true;
      else if (text == "false" || text == "0" || text == "off" || text == "no") v = false;
      else throw bad();
      break;
    case Kind::integer: {
      std::int64_t x = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) throw bad();
      v = x;
      break;
    }
    case Kind::number: {
      double x = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) throw bad();
      v = x;
      break;
    }
    case Kind::list: {
      std::vector<std::string> items;
      for (std::size_t at = 0; at <= text.size();) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        if (comma > at) items.push_back(text.substr(at, comma - at));
        at = comma + 1;
      }
      v = items;
      break;
    }
    default:
      v = text;
  }
  if (std::string p = problem(v); !p.empty()) throw InputError(fmt::format("{}: {}", flag_name(name), p));
  if (kind == Kind::number && std::holds_alternative<std::int64_t>(v)) v = double(std::get<std::int64_t>(v));
  return v;
}

OptionList::OptionList(std::vector<Option> options, std::function<std::pair<std::string, std::string>(const void*)> check)
    : options_(std::move(options)), check_(std::move(check)) {}

const Option* OptionList::find(const std::string& name) const {
  for (const Option& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

void OptionList::validate(const void* s, const std::string& source, bool as_flags) const {
  auto fail = [&](const std::string& key, const std::string& problem) {
    return InputError(as_flags ? fmt::format("{}: {}", flag_name(key), problem)
                               : fmt::format("{}: key '{}': {}", source, key, problem));
  };
  for (const Option& o : options_)
    if (std::string p = o.problem(o.get(s)); !p.empty()) throw fail(o.name, p);
  if (check_) {
    auto [key, problem] = check_(s);
    if (!problem.empty()) throw fail(key, problem);
  }
}

std::string OptionList::to_json(const void* s) const {
  json j = json::object();
  for (const Option& o : options_) {
    OptionValue v = o.get(s);
    std::visit([&](const auto& x) { j[o.name] = x; }, v);
  }
  return j.dump();
}

namespace {
// JSON value -> option value of the kind asked for, or the problem.
OptionValue from_json(const io::JsonMember& m) {
  if (auto* b = std::get_if<bool>(&m.value)) return *b;
  if (auto* i = std::get_if<std::int64_t>(&m.value)) return *i;
  if (auto* u = std::get_if<std::uint64_t>(&m.value)) return double(*u);  // above INT64_MAX
  if (auto* d = std::get_if<double>(&m.value)) return *d;
  if (auto* s = std::get_if<std::string>(&m.value)) return *s;
  return std::string("\x01") + m.json;  // not a scalar: no kind accepts it
}
}  // namespace

namespace {
// read_json, refusing the keys among `derived` (the command sets those itself, from what
// `why` says).
void read_json_except(const std::string& text, const std::string& source, const std::vector<BoundOptions>& sets,
                      bool require_all, const std::vector<std::string>& derived, const std::string& why) {
  std::optional<std::vector<io::JsonMember>> members;
  try {
    members = io::parse_json_object(text, source, /*max_depth=*/32);  // duplicate keys, depth, NUL, BOM
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
  if (!members) throw InputError(fmt::format("{}: must be a JSON object of options", source));
  std::vector<std::string> known;
  for (const BoundOptions& b : sets)
    for (const Option& o : b.list->options()) known.push_back(o.name);
  for (const io::JsonMember& member : *members) {
    const std::string& key = member.key;
    if (std::find(derived.begin(), derived.end(), key) != derived.end())
      throw InputError(fmt::format("{}: key '{}' is not an option of this command: {}", cut(source), key, why));
    const Option* opt = nullptr;
    void* target = nullptr;
    for (const BoundOptions& b : sets)
      if ((opt = b.list->find(key))) {
        target = b.target;
        break;
      }
    if (!opt) {
      const std::string near = closest(key, known);
      throw InputError(fmt::format("{}: unknown key '{}'{}", source, cut(key),
                                   near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near)));
    }
    OptionValue v = from_json(member);
    if (std::string p = opt->problem(v); !p.empty()) {
      if (std::holds_alternative<std::string>(v) && std::get<std::string>(v).starts_with("\x01"))
        p = fmt::format("must be {}, got {}", opt->describe(), cut(member.json));
      throw InputError(fmt::format("{}: key '{}': {}", source, key, p));
    }
    if (opt->kind == Option::Kind::number && std::holds_alternative<std::int64_t>(v)) v = double(std::get<std::int64_t>(v));
    opt->set(target, v);
  }
  if (require_all)
    for (const BoundOptions& b : sets)
      for (const Option& o : b.list->options())
        if (!o.optional_in_json && std::none_of(members->begin(), members->end(),
                                                [&](const io::JsonMember& m) { return m.key == o.name; }))
          throw InputError(fmt::format("{}: missing key '{}' ({})", source, o.name, o.describe()));
  for (const BoundOptions& b : sets) b.list->validate(b.target, source);
}

// A regular file of at most 16 MiB, as text.
std::string options_text(const std::string& path) {
  try {
    return io::read_file(path, std::size_t(16) << 20, "options file");
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
}
}  // namespace

void read_json(const std::string& text, const std::string& source, const std::vector<BoundOptions>& sets,
               bool require_all) {
  read_json_except(text, source, sets, require_all, {}, "");
}

void read_json(const std::string& text, const std::string& source, std::initializer_list<BoundOptions> sets,
               bool require_all) {
  read_json(text, source, std::vector<BoundOptions>(sets), require_all);
}

void read_json_file(const std::string& path, const std::vector<BoundOptions>& sets,
                    const std::vector<std::string>& derived, const std::string& why) {
  read_json_except(options_text(path), path, sets, /*require_all=*/false, derived, why);
}

void read_json_file(const std::string& path, const std::vector<BoundOptions>& sets, bool require_all) {
  read_json(options_text(path), path, sets, require_all);
}

void set_from_text(const std::vector<BoundOptions>& sets, const std::string& name, const std::string& text) {
  for (const BoundOptions& b : sets)
    if (const Option* o = b.list->find(name)) {
      o->set(b.target, o->parse_text(text));
      return;
    }
  throw InputError(fmt::format("unknown option {}", flag_name(name)));
}

std::string flag_name(const std::string& option_name) {
  std::string f = "--" + option_name;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

std::string closest(const std::string& name, const std::vector<std::string>& known) {
  const std::vector<std::string> near = closest_names(name, known);  // ops/ir/graph.h
  return near.empty() ? std::string() : near.front();
}

}  // namespace gg::train
