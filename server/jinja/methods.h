// Methods of strings, lists and dicts in the chat-template Jinja engine (str.split, list.append,
// dict.items, ...), each returned as a function bound to its object, and the argument helpers the
// builtins share. Errors are thrown as JinjaError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/jinja/value.h"

namespace tandem::jinja {

// `self.name` for a string, a list or a dict (mapping): the bound method, or undefined.
Value string_method(const Value& self, const std::string& name);
Value list_method(const Value& self, const std::string& name);
Value object_method(const Value& self, const std::string& name);

// Argument helpers: a required string; an optional integer (fallback when absent or none).
std::string want_string(const Value* v, const char* what);
int64_t want_int(const Value* v, const char* what, int64_t fallback);
Value bind(Function fn);
// Decimal digits as an index; SIZE_MAX when too large (out of range of any list).
size_t parse_index(std::string_view digits);
// Python index normalisation for a sequence of length n; nullopt when out of range.
std::optional<size_t> normalize_index(int64_t i, size_t n);

}  // namespace tandem::jinja
