// parse_json_strict: nlohmann's SAX parser (iterative, so depth costs no stack) driving a
// small DOM builder that refuses a duplicate key with one map lookup and stops at
// max_depth. nlohmann's own callback parser is not used: it rescans the parent object
// after every nested value (quadratic: far too slow on a large header).
// parse_json_object (io/json_object.h): the same parse, handed on without nlohmann types.
#include "io/json.h"

#include <fmt/format.h>

#include <climits>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/json_object.h"

namespace gg::io {

namespace {

using json = nlohmann::json;

class StrictBuilder : public nlohmann::json_sax<json> {
public:
  explicit StrictBuilder(int max_depth) : max_depth_(max_depth) {}

  json root;
  std::string problem;         // set when a handler refuses the input
  std::string syntax_error;    // nlohmann's message, cut short

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool v) override { return add(json(v)); }
  bool number_integer(number_integer_t v) override { return add(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(json(v)); }
  bool string(string_t& v) override { return add(json(std::move(v))); }
  bool binary(binary_t& v) override { return add(json::binary(std::move(v))); }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    json& obj = *stack_.back();
    auto [it, inserted] = obj.get_ref<json::object_t&>().try_emplace(k);
    if (!inserted) {
      problem = fmt::format("has a duplicate key {}{}", in_quotes(k), stack_.size() == 1 ? "" : " inside an object");
      return false;
    }
    slot_ = &it->second;
    return true;
  }

  bool parse_error(std::size_t, const std::string& last_token, const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    if (auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    // The token may be the whole offending text (a 7 KB string): keep only its start.
    if (last_token.size() > 40)
      if (auto p = what.find(last_token); p != std::string::npos) what.replace(p, last_token.size(), cut(last_token, 40));
    // Control bytes and DEL written as \xNN: four bytes each, so the budget counts the
    // escaped text (a run of DEL bytes made 960-byte lines; found by fuzz_json).
    constexpr std::size_t budget = 240;
    std::string one_line;
    std::size_t used = 0;
    for (; used < what.size(); ++used) {
      auto u = static_cast<unsigned char>(what[used]);
      const std::string piece = u < 0x20 || u == 0x7f ? fmt::format("\\x{:02x}", u) : std::string(1, what[used]);
      if (one_line.size() + piece.size() > budget) break;
      one_line += piece;
    }
    if (used < what.size()) {
      while (!one_line.empty() && (static_cast<unsigned char>(one_line.back()) & 0xC0) == 0x80) one_line.pop_back();
      if (!one_line.empty() && static_cast<unsigned char>(one_line.back()) >= 0xC0) one_line.pop_back();  // a split UTF-8 lead
      one_line += fmt::format("... ({} bytes)", what.size());
    }
    syntax_error = one_line;
    return false;
  }

private:
  // Places `v` where the next value goes: the root, the end of the open array, or the
  // slot the last key made in the open object. Returns where it went.
  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      auto& arr = top.get_ref<json::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();  // stays valid: nothing is added to this array while the child is open
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool add(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      problem = fmt::format("nests deeper than {} levels", max_depth_);
      return false;
    }
    stack_.push_back(place(std::move(v)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  int max_depth_;
  std::vector<json*> stack_;  // the open objects and arrays, outermost first
  json* slot_ = nullptr;      // the value of the last key read
};

}  // namespace

json parse_json_strict(const std::string& text, const std::string& source, int max_depth) {
  const std::string name = cut(source, 200);
  if (max_depth < 1) throw Error(fmt::format("{}: internal: max_depth {} < 1", name, max_depth));
  // nlohmann skips a leading BOM and stops at a NUL as if the text ended there; the
  // safetensors reference implementation (serde_json) refuses both, and so do we.
  if (text.rfind("\xef\xbb\xbf", 0) == 0)
    throw Error(fmt::format("{} starts with a UTF-8 byte order mark, which JSON does not allow", name));
  if (auto p = text.find('\0'); p != std::string::npos)
    throw Error(fmt::format("{} is not valid JSON: a NUL byte at offset {}", name, p));
  StrictBuilder b(max_depth);
  bool ok = json::sax_parse(text, &b, json::input_format_t::json, /*strict=*/true);
  if (!b.problem.empty()) throw Error(fmt::format("{} {}", name, b.problem));
  if (!b.syntax_error.empty()) throw Error(fmt::format("{} is not valid JSON: {}", name, b.syntax_error));
  if (!ok) throw Error(fmt::format("{} is not valid JSON", name));
  return std::move(b.root);
}

std::optional<std::vector<JsonMember>> parse_json_object(const std::string& text, const std::string& source,
                                                         int max_depth) {
  const json j = parse_json_strict(text, source, max_depth);
  if (!j.is_object()) return std::nullopt;
  std::vector<JsonMember> members;
  members.reserve(j.size());
  for (auto& [key, v] : j.items()) {  // a std::map: sorted by key
    JsonMember m{key, std::monostate{}, ""};
    if (v.is_boolean())
      m.value = v.get<bool>();
    else if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
      m.value = v.get<std::uint64_t>();
    else if (v.is_number_integer())
      m.value = v.get<std::int64_t>();
    else if (v.is_number())
      m.value = v.get<double>();
    else if (v.is_string())
      m.value = v.get<std::string>();
    else
      m.json = v.dump();
    members.push_back(std::move(m));
  }
  return members;
}

}  // namespace gg::io
