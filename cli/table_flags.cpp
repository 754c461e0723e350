#include "cli/table_flags.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/input_file.h"

namespace gg::cli {

void TableFlags::add_to(CLI::App* app, const std::vector<std::string>& skip, const std::string& reason,
                        bool options_file) {
  derived = skip;
  why = reason;
  static const char* kind_names[] = {"BOOL", "INT", "FLOAT", "TEXT", "CHOICE", "LIST"};
  for (const train::BoundOptions& b : sets)
    for (const train::Option& o : b.list->options()) {
      if (std::find(skip.begin(), skip.end(), o.name) != skip.end()) continue;
      const std::string name = o.name, def = train::to_text(o.get(b.target));
      const std::string help = fmt::format("{} ({}{})", o.help, o.describe(),
                                           o.required ? "; required" : def.empty() ? "" : fmt::format("; default {}", def));
      auto* flag = app->add_option_function<std::string>(
          train::flag_name(name),
          // A flag given alone (or with an empty value) means its `bare` text when it has
          // one ("--resume" is true); otherwise an empty text stays empty, to be judged.
          [this, name, bare = o.bare](const std::string& v) { given.push_back({name, v.empty() ? bare : v}); }, help);
      flag->type_name(kind_names[int(o.kind)]);
      if (!o.bare.empty()) flag->expected(0, 1);
      if (o.required) flag->required();
    }
  if (options_file) app->add_option("--config", config, "JSON file of options (the keys above, with '_'); flags override it");
}

void TableFlags::apply() {
  if (!config.empty()) {
    require_input_file("--config", config);
    train::read_json_file(config, sets, derived, why);
  }
  // A list option given several times is one list of all the values.
  std::vector<std::pair<std::string, std::string>> merged;
  for (auto& [name, text] : given) {
    const train::Option* o = nullptr;
    for (const train::BoundOptions& b : sets)
      if ((o = b.list->find(name))) break;
    auto at = std::find_if(merged.begin(), merged.end(), [&](auto& m) { return m.first == name; });
    if (o && o->kind == train::Option::Kind::list && at != merged.end()) at->second += "," + text;
    else merged.push_back({name, text});
  }
  for (auto& [name, text] : merged) train::set_from_text(sets, name, text);
  for (const train::BoundOptions& b : sets) b.list->validate(b.target, "options", /*as_flags=*/true);
  // The files the options name, before any work: a refusal names the flag.
  for (const train::BoundOptions& b : sets)
    for (const train::Option& o : b.list->options()) {
      if (o.path == train::Option::Path::none || std::find(derived.begin(), derived.end(), o.name) != derived.end())
        continue;
      const std::string path = train::to_text(o.get(b.target));
      if (path.empty() && !o.required) continue;  // not given: the command's default
      if (o.path == train::Option::Path::input) require_input_file(train::flag_name(o.name), path);
      else require_output_file(train::flag_name(o.name), path);
    }
}

}  // namespace gg::cli
