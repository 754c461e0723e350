// Pieces for one-line error messages about outside data: values cut to a bounded length
// (a 200 KB tensor name must not make a 200 KB line), quoted names (in_quotes) with control bytes
// escaped, and long lists counted ("a, b, c and 1,020 more").
// Not here: the error type (gg::io::Error, io/error.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gg::io {

// `s` if it has at most `max` bytes; otherwise its first `max` bytes (never splitting a
// UTF-8 sequence) followed by "... (N bytes)"; control bytes and DEL written as \xNN, so the
// message stays on one line. The result has at most max * 4 + 32 bytes.
std::string cut(std::string_view s, std::size_t max = 80);

// 'cut(s)' in single quotes, with control bytes, DEL, the quote and the backslash written
// as \xNN, so the message stays on one line. At most max * 4 + 34 bytes.
std::string in_quotes(std::string_view s, std::size_t max = 80);

// 1020 -> "1,020".
std::string with_commas(std::uint64_t n);

// The first `shown` items joined with ", ", each cut to `max_item` bytes, then
// " and N more" when there are more: "a, b, c and 1,020 more". Empty list: "".
std::string count_list(const std::vector<std::string>& items, std::size_t shown = 3,
                       std::size_t max_item = 40);

}  // namespace gg::io
