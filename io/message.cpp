// Cutting, quoting and counting for one-line messages (see io/message.h).
#include "io/message.h"

#include <fmt/format.h>

namespace gg::io {

namespace {
// The first `max` bytes of `s` (never splitting a UTF-8 sequence), then "... (N bytes)".
std::string cut_bytes(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  std::size_t end = max;
  // Step back over UTF-8 continuation bytes so a multi-byte character is not split.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) --end;
  return fmt::format("{}... ({} bytes)", s.substr(0, end), with_commas(s.size()));
}
}  // namespace

std::string cut(std::string_view s, std::size_t max) {
  std::string out;
  for (char c : cut_bytes(s, max)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  return out;
}

std::string in_quotes(std::string_view s, std::size_t max) {
  std::string out = "'";
  for (char c : cut_bytes(s, max)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\'' || c == '\\')
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out + "'";
}

std::string with_commas(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string count_list(const std::vector<std::string>& items, std::size_t shown, std::size_t max_item) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < shown; ++i) out += (i ? ", " : "") + cut(items[i], max_item);
  if (items.size() > shown) out += fmt::format(" and {} more", with_commas(items.size() - shown));
  return out;
}

}  // namespace gg::io
