// Builtins of the chat-template Jinja engine: attribute and item access (with the string,
// dict and list methods), slicing, filters, tests and the global functions. Errors are thrown
// as JinjaError; the interpreter adds the template line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "server/jinja/value.h"

namespace tandem::jinja {

// `obj.name`: a key of a mapping/namespace, else a method (str.split, dict.items, ...) bound
// to obj, else undefined.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: mapping key, list/string index (negative from the end), else undefined.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on a list or a string (code points), Python rules.
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// A dotted attribute path for map/sort/selectattr: "a.b", "items.0".
Value attribute_path(const Value& item, std::string_view path);

// `operand | name(args)`; throws JinjaError for an unknown filter or a bad operand.
Value apply_filter(const std::string& name, const Value& operand, CallArgs& args);
// `operand is name(args)`; throws JinjaError for an unknown test.
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);

// Ordering for sort/dictsort: numbers (bools as 0/1) and strings; -1, 0 or 1.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

// The iteration forms of a value for `for` and list filters: a list's items, a mapping's keys,
// a string's characters, nothing for undefined; throws JinjaError otherwise.
Array iterate(const Value& v);

// namespace, range, dict, raise_exception, strftime_now. `max_items` bounds range().
void add_globals(Object& globals, size_t max_items);

}  // namespace tandem::jinja
