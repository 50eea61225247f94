// Methods of strings, lists and dicts in the chat-template Jinja engine (Python semantics,
// code point indices), bound to their object by get_attr (see server/jinja/methods.h).
#include "server/jinja/methods.h"

#include <charconv>
#include <cstring>

#include "engine/tokenizer/utf8.h"
#include "server/jinja/builtins.h"
#include "server/jinja/text.h"

namespace tandem::jinja {

std::string want_string(const Value* v, const char* what) {
  if (v == nullptr || !v->is_string()) throw JinjaError(std::string(what) + " must be a string");
  return v->str();
}

int64_t want_int(const Value* v, const char* what, int64_t fallback) {
  if (v == nullptr || v->is_none() || v->is_undefined()) return fallback;
  if (!v->is_int()) throw JinjaError(std::string(what) + " must be an integer");
  return v->as_int();
}

Value bind(Function fn) { return Value::from_function(std::move(fn)); }

// Decimal digits as an index; SIZE_MAX when too large (out of range of any list).
size_t parse_index(std::string_view digits) {
  size_t v = 0;
  const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  return res.ec == std::errc() ? v : SIZE_MAX;
}

// Python index normalisation for a sequence of length n; nullopt when out of range.
std::optional<size_t> normalize_index(int64_t i, size_t n) {
  const auto len = static_cast<int64_t>(n);
  if (i < 0) i += len;
  if (i < 0 || i >= len) return std::nullopt;
  return static_cast<size_t>(i);
}

namespace {

Value string_list(const std::vector<std::string>& parts) {
  Array a;
  a.reserve(parts.size());
  for (const std::string& p : parts) a.push_back(Value::from_string(p));
  return Value::from_array(std::move(a));
}

// str.startswith / str.endswith with a string or a tuple of strings.
bool affix_match(const std::string& s, const Value* pattern, bool prefix) {
  const auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (pattern != nullptr && pattern->is_string()) return one(pattern->str());
  if (pattern != nullptr && pattern->is_array()) {
    for (const Value& p : pattern->array()) {
      if (!p.is_string()) throw JinjaError("startswith/endswith tuple items must be strings");
      if (one(p.str())) return true;
    }
    return false;
  }
  throw JinjaError("startswith/endswith need a string or a tuple of strings");
}

// Python str.format with {}, {0} and {name} fields (format specs are ignored).
std::string python_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw JinjaError("single '{' in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    field = field.substr(0, field.find(':'));
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      const size_t k = parse_index(field);
      v = k < args.positional.size() ? &args.positional[k] : nullptr;
    } else {
      for (const auto& [name, value] : args.keyword) {
        if (name == field) v = &value;
      }
    }
    if (v == nullptr) throw JinjaError("format field '" + field + "' has no argument");
    out += to_output_string(*v);
    check_size(out.size());
    i = close;
  }
  return out;
}

// Bounds list.append/extend (a template has no business building longer lists).
constexpr size_t kMaxListItems = size_t{1} << 22;

Value object_items(const Value& self) {
  Array out;
  for (const auto& [k, v] : self.object().items) {
    out.push_back(Value::from_array({Value::from_string(k), v}));
  }
  return Value::from_array(std::move(out));
}

}  // namespace

Value string_method(const Value& self, const std::string& name) {
  // Methods capture the string Value (shared), not a copy of its text.
  if (name == "length") return Value::from_int(static_cast<int64_t>(utf8::length(self.str())));
  if (name == "upper")
    return bind([self](CallArgs&) { return Value::from_string(to_upper(self.str())); });
  if (name == "lower")
    return bind([self](CallArgs&) { return Value::from_string(to_lower(self.str())); });
  if (name == "title")
    return bind([self](CallArgs&) { return Value::from_string(to_title(self.str())); });
  if (name == "capitalize") {
    return bind([self](CallArgs&) { return Value::from_string(capitalize(self.str())); });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const StripSide side = name == "strip"    ? StripSide::kBoth
                           : name == "lstrip" ? StripSide::kLeft
                                              : StripSide::kRight;
    return bind([self, side](CallArgs& a) {
      const std::string& s = self.str();
      const Value* chars = a.get(0, "chars");
      if (chars != nullptr && !chars->is_none() && !chars->is_undefined()) {
        const std::string set = want_string(chars, "strip chars");
        return Value::from_string(strip(s, &set, side));
      }
      return Value::from_string(strip(s, nullptr, side));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return bind([self, prefix](CallArgs& a) {
      const std::string& s = self.str();
      return Value::from_bool(affix_match(s, a.get(0, "prefix"), prefix));
    });
  }
  if (name == "split") {
    return bind([self](CallArgs& a) {
      const std::string& s = self.str();
      const Value* sep = a.get(0, "sep");
      const int64_t maxsplit = want_int(a.get(1, "maxsplit"), "maxsplit", -1);
      if (sep == nullptr || sep->is_none() || sep->is_undefined()) {
        return string_list(split(s, nullptr, maxsplit));
      }
      const std::string sep_s = want_string(sep, "sep");
      return string_list(split(s, &sep_s, maxsplit));
    });
  }
  if (name == "replace") {
    return bind([self](CallArgs& a) {
      const std::string& s = self.str();
      const std::string from = want_string(a.get(0, "old"), "replace() old");
      const std::string to = want_string(a.get(1, "new"), "replace() new");
      return Value::from_string(replace(s, from, to, want_int(a.get(2, "count"), "count", -1)));
    });
  }
  if (name == "find") {
    return bind([self](CallArgs& a) {
      const std::string& s = self.str();
      return Value::from_int(find(s, want_string(a.get(0, "sub"), "find() argument")));
    });
  }
  if (name == "count") {
    return bind([self](CallArgs& a) {
      const std::string& s = self.str();
      return Value::from_int(count(s, want_string(a.get(0, "sub"), "count() argument")));
    });
  }
  if (name == "join") {
    return bind([self](CallArgs& a) {
      const std::string& s = self.str();
      const Value* items = a.get(0, "iterable");
      if (items == nullptr) throw JinjaError("join() takes one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*items)) {
        if (!first) out += s;
        out += to_output_string(v);
        check_size(out.size());
        first = false;
      }
      return Value::from_string(std::move(out));
    });
  }
  if (name == "format") {
    return bind([self](CallArgs& a) { return Value::from_string(python_format(self.str(), a)); });
  }
  return Value();
}

// Python list methods; the mutating ones return none like Python's.
Value list_method(const Value& self, const std::string& name) {
  if (name == "length") return Value::from_int(static_cast<int64_t>(self.array().size()));
  if (name == "append") {
    return bind([self](CallArgs& a) {
      if (a.positional.size() != 1) throw JinjaError("append() takes exactly one argument");
      if (self.array().size() >= kMaxListItems) throw JinjaError("list too long");
      self.array_mut().push_back(a.positional[0]);
      return Value::none();
    });
  }
  if (name == "extend") {
    return bind([self](CallArgs& a) {
      if (a.positional.size() != 1) throw JinjaError("extend() takes exactly one argument");
      Array more = iterate(a.positional[0]);
      if (self.array().size() + more.size() > kMaxListItems) throw JinjaError("list too long");
      self.array_mut().insert(self.array_mut().end(), more.begin(), more.end());
      return Value::none();
    });
  }
  if (name == "insert") {
    return bind([self](CallArgs& a) {
      if (a.positional.size() != 2 || !a.positional[0].is_int()) {
        throw JinjaError("insert() takes an index and a value");
      }
      Array& arr = self.array_mut();
      const auto len = static_cast<int64_t>(arr.size());
      int64_t i = a.positional[0].as_int();
      if (i < 0) i = std::max<int64_t>(i + len, 0);
      arr.insert(arr.begin() + std::min(i, len), a.positional[1]);
      return Value::none();
    });
  }
  if (name == "pop") {
    return bind([self](CallArgs& a) {
      Array& arr = self.array_mut();
      const int64_t at = want_int(a.get(0, "index"), "pop() index", -1);
      const auto i = normalize_index(at, arr.size());
      if (!i) throw JinjaError("pop index out of range");
      Value v = arr[*i];
      arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(*i));
      return v;
    });
  }
  if (name == "index" || name == "count") {
    const bool index = name == "index";
    return bind([self, index](CallArgs& a) {
      if (a.positional.size() != 1) throw JinjaError("index()/count() take one argument");
      int64_t n = 0;
      for (size_t i = 0; i < self.array().size(); ++i) {
        if (!equals(self.array()[i], a.positional[0])) continue;
        if (index) return Value::from_int(static_cast<int64_t>(i));
        ++n;
      }
      if (index) throw JinjaError("value is not in list");
      return Value::from_int(n);
    });
  }
  return Value();
}

Value object_method(const Value& self, const std::string& name) {
  if (name == "get") {
    return bind([self](CallArgs& a) {
      const Value* key = a.get(0, "key");
      if (key == nullptr || !key->is_string()) throw JinjaError("dict.get() key must be a string");
      if (const Value* v = self.object().find(key->str())) return *v;
      const Value* fallback = a.get(1, "default");
      return fallback ? *fallback : Value::none();
    });
  }
  if (name == "items") return bind([self](CallArgs&) { return object_items(self); });
  if (name == "keys") {
    return bind([self](CallArgs&) {
      Array out;
      for (const auto& kv : self.object().items) out.push_back(Value::from_string(kv.first));
      return Value::from_array(std::move(out));
    });
  }
  if (name == "values") {
    return bind([self](CallArgs&) {
      Array out;
      for (const auto& kv : self.object().items) out.push_back(kv.second);
      return Value::from_array(std::move(out));
    });
  }
  if (name == "dictsort") {
    return bind([self](CallArgs& a) { return apply_filter("dictsort", self, a); });
  }
  if (name == "update") {
    return bind([self](CallArgs& a) {
      if (!a.positional.empty()) {
        if (a.positional.size() > 1 || !a.positional[0].is_attr_container()) {
          throw JinjaError("update() takes one mapping");
        }
        for (const auto& [k, v] : a.positional[0].object().items) self.object_mut().set(k, v);
      }
      for (const auto& [k, v] : a.keyword) self.object_mut().set(k, v);
      return Value::none();
    });
  }
  return Value();
}

}  // namespace tandem::jinja
