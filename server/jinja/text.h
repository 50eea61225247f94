// String helpers of the chat-template Jinja engine with Python str semantics on UTF-8:
// case mapping (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic), strip with a set of
// characters, split, replace, title, and JavaScript-style number parsing for |int / |float.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
// Python str.title(): a letter after a letter is lowered, any other letter raised.
std::string to_title(std::string_view s);
// Python str.capitalize(): first character raised, the rest lowered.
std::string capitalize(std::string_view s);

enum class StripSide : uint8_t { kBoth, kLeft, kRight };
// Python strip: `chars` null means whitespace, else any of its characters.
std::string strip(std::string_view s, const std::string* chars, StripSide side);

// Python str.split(sep=None, maxsplit=-1).
std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit);
// Python str.replace(old, new, count=-1).
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
// Python str.find / str.count (code point index / non-overlapping count).
int64_t find(std::string_view s, std::string_view sub);
int64_t count(std::string_view s, std::string_view sub);

// JavaScript parseInt(s, 10) / parseFloat(s): a leading number, or nullopt.
std::optional<int64_t> parse_int_prefix(std::string_view s);
std::optional<double> parse_float_prefix(std::string_view s);

}  // namespace tandem::jinja
