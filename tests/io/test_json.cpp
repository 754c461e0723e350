// Tests for io/json (parse_json_strict, parse_json_object) and io/message (cut, in_quotes,
// count_list): strict JSON refuses what nlohmann alone accepts (duplicate keys, a NUL, a
// BOM), stops deep nesting, stays fast on many keys, and every message is one short line.
#include "io/json.h"
#include "io/json_object.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

using gg::io::Error;
using gg::io::parse_json_strict;

namespace {

// The message parse_json_strict throws for `text`, or "no error".
std::string json_error(const std::string& text, int max_depth = 64) {
  try {
    parse_json_strict(text, "c.json", max_depth);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("json: valid documents parse to the same value as nlohmann") {
  const std::string text = R"( {"a": [1, -2, 3.5, "x", true, null, {"b": {}}], "c": {"d": [[]]}, "e": 18446744073709551615} )";
  CHECK(parse_json_strict(text, "c.json") == nlohmann::json::parse(text));
  CHECK(parse_json_strict("7", "c.json") == 7);
  CHECK(parse_json_strict("[]", "c.json", 1) == nlohmann::json::array());
  // The same key in two different objects is fine.
  CHECK(parse_json_strict(R"({"a":{"k":1},"b":{"k":2}})", "c.json")["b"]["k"] == 2);
}

TEST_CASE("json: duplicate keys are refused, at any depth") {
  CHECK(json_error(R"({"lr": 1, "lr": 2})") == "c.json has a duplicate key 'lr'");
  CHECK(json_error(R"({"a": [{"k": 1, "k": 1}]})") == "c.json has a duplicate key 'k' inside an object");
}

TEST_CASE("json: 100,000 keys are parsed, and a duplicate among them refused") {
  std::string text = "{";
  for (int i = 0; i < 100'000; ++i) text += fmt::format("{}\"k{}\":{{\"v\":[{}]}}", i ? "," : "", i, i);
  CHECK(parse_json_strict(text + "}", "c.json").size() == 100'000);
  CHECK(json_error(text + R"(,"k0":1})") == "c.json has a duplicate key 'k0'");
}

TEST_CASE("json: nesting is bounded") {
  CHECK(json_error("[[[]]]", 3) == "no error");
  CHECK(json_error("[[[[]]]]", 3) == "c.json nests deeper than 3 levels");
  CHECK(json_error(R"({"a":{"b":{"c":{}}}})", 3) == "c.json nests deeper than 3 levels");
  CHECK(json_error(std::string(64, '[') + std::string(64, ']')) == "no error");
  // 100,000 deep, closed or not: refused at depth 65, no stack overflow, short message.
  CHECK(json_error(std::string(100'000, '[') + std::string(100'000, ']')) == "c.json nests deeper than 64 levels");
  CHECK(json_error(R"({"gelu":)" + std::string(100'000, '[')) == "c.json nests deeper than 64 levels");
  std::string objects;
  for (int i = 0; i < 100'000; ++i) objects += R"({"a":)";
  CHECK(json_error(objects) == "c.json nests deeper than 64 levels");
}

TEST_CASE("json: a NUL byte or a byte order mark is refused, whitespace is not") {
  CHECK(json_error(std::string("{}\0{}", 5)) == "c.json is not valid JSON: a NUL byte at offset 2");
  CHECK(json_error(std::string("{\"a\0\":1}", 8)) == "c.json is not valid JSON: a NUL byte at offset 3");
  CHECK(json_error("\xef\xbb\xbf{}") == "c.json starts with a UTF-8 byte order mark, which JSON does not allow");
  CHECK(json_error(" \t\r\n{} \t\r\n") == "no error");
}

TEST_CASE("json: syntax errors are one short line with line and column") {
  CHECK(json_error("{\"a\":\n  tru}") ==
        "c.json is not valid JSON: parse error at line 2, column 6: syntax error while parsing value - "
        "invalid literal; last read: '\"a\":<U+000A>  tru}'");
  CHECK(json_error("") ==
        "c.json is not valid JSON: parse error at line 1, column 1: syntax error while parsing value - "
        "unexpected end of input; expected '[', '{', or a literal");
  CHECK(json_error("{} {}").find("c.json is not valid JSON: parse error at line 1, column 4") == 0);
  const std::string big(5'000'000, '7');
  for (const std::string& text : {"{\"gelu\": \"" + big + "\n\"}",  // a raw newline inside a 5 MB string
                                  "{\"gelu\": " + big + "e999999}",  // a 5 MB number that overflows
                                  "{\"gelu\": " + big + "x}",        // a 5 MB invalid literal
                                  "[\"\xff" + big + "\"]",          // invalid UTF-8
                                  // DEL bytes in a key, each written \x7f (4 bytes): found by fuzz_json
                                  "{\"" + std::string(116, '\x7f') + "\n\n"}) {
    const std::string msg = json_error(text);
    INFO(msg.substr(0, 500));
    CHECK(msg.rfind("c.json is not valid JSON: ", 0) == 0);
    CHECK(msg.size() < 300);
    CHECK(msg.find('\n') == std::string::npos);
  }
  // The source itself is cut too.
  try {
    parse_json_strict("{", std::string(10'000, 's'));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).size() < 400);
  }
}

TEST_CASE("message: cut, in_quotes, with_commas, count_list") {
  using namespace gg::io;
  CHECK(cut("short") == "short");
  CHECK(cut(std::string(80, 'a')) == std::string(80, 'a'));
  CHECK(cut(std::string(200'000, 'a')) == std::string(80, 'a') + "... (200,000 bytes)");
  CHECK(cut("abcdef", 3) == "abc... (6 bytes)");
  // A multi-byte character is not split: "é" is 2 bytes at offsets 2-3.
  CHECK(cut("ab\xc3\xa9z", 3) == "ab... (5 bytes)");
  CHECK(in_quotes("a\nb'c") == "'a\\x0ab\\x27c'");
  CHECK(in_quotes(std::string(1000, 'q'), 10) == "'qqqqqqqqqq... (1,000 bytes)'");
  CHECK(with_commas(0) == "0");
  CHECK(with_commas(999) == "999");
  CHECK(with_commas(1000) == "1,000");
  CHECK(with_commas(1234567) == "1,234,567");
  CHECK(count_list({}) == "");
  CHECK(count_list({"a"}) == "a");
  CHECK(count_list({"a", "b", "c"}) == "a, b, c");
  std::vector<std::string> many;
  for (int i = 0; i < 1023; ++i) many.push_back(fmt::format("blocks.{}.w", i));
  CHECK(count_list(many) == "blocks.0.w, blocks.1.w, blocks.2.w and 1,020 more");
  CHECK(count_list({std::string(100, 'x'), "y"}, 1, 5) == "xxxxx... (100 bytes) and 1 more");
}

TEST_CASE("json: parse_json_object hands an object's members on as plain values, sorted by key") {
  using gg::io::JsonMember;
  const auto members = gg::io::parse_json_object(
      R"({"s": "x", "b": true, "i": -3, "u": 18446744073709551615, "n": 9223372036854775807, "d": 0.5,
          "a": [1, {"k": null}], "z": null})",
      "c.json");
  REQUIRE(members);
  std::vector<std::string> keys;
  for (const JsonMember& m : *members) keys.push_back(m.key);
  CHECK(keys == std::vector<std::string>{"a", "b", "d", "i", "n", "s", "u", "z"});
  auto at = [&](const char* k) { return *std::find_if(members->begin(), members->end(), [&](auto& m) { return m.key == k; }); };
  CHECK(at("a").json == R"([1,{"k":null}])");
  CHECK(std::holds_alternative<std::monostate>(at("a").value));
  CHECK(std::get<bool>(at("b").value) == true);
  CHECK(std::get<double>(at("d").value) == 0.5);
  CHECK(std::get<std::int64_t>(at("i").value) == -3);
  CHECK(std::get<std::int64_t>(at("n").value) == INT64_MAX);  // unsigned only above INT64_MAX
  CHECK(std::get<std::string>(at("s").value) == "x");
  CHECK(at("s").json.empty());
  CHECK(std::get<std::uint64_t>(at("u").value) == UINT64_MAX);
  CHECK(at("z").json == "null");
  CHECK_FALSE(gg::io::parse_json_object("[1]", "c.json"));
  CHECK_FALSE(gg::io::parse_json_object("3", "c.json"));
  CHECK(gg::io::parse_json_object("{}", "c.json")->empty());
  // The strict reader's refusals, unchanged.
  CHECK_THROWS_WITH_AS(gg::io::parse_json_object(R"({"lr": 1, "lr": 2})", "c.json"),
                       "c.json has a duplicate key 'lr'", Error);
  CHECK_THROWS_WITH_AS(gg::io::parse_json_object(R"({"a": [[1]]})", "c.json", 2), "c.json nests deeper than 2 levels",
                       Error);
}
