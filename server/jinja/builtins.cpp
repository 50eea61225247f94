// Builtins of the chat-template Jinja engine: attribute/item access, slicing, ordering,
// iteration and the global functions (the methods of strings, dicts and lists: methods.cpp).
#include "server/jinja/builtins.h"

#include <charconv>
#include <cstring>
#include <ctime>

#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"
#include "server/jinja/methods.h"
#include "server/jinja/text.h"

namespace tandem::jinja {
Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_attr_container()) {
    if (const Value* v = obj.object().find(name)) return *v;
    return obj.is_object() ? object_method(obj, name) : Value();
  }
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_array()) return list_method(obj, name);
  return Value();
}

Value get_item(const Value& obj, const Value& key) {
  if (key.is_string()) return get_attr(obj, key.str());
  if (!key.is_int()) return Value();
  if (obj.is_array()) {
    const auto i = normalize_index(key.as_int(), obj.array().size());
    return i ? obj.array()[*i] : Value();
  }
  if (obj.is_string()) {
    const auto chars = utf8::chars(obj.str());
    const auto i = normalize_index(key.as_int(), chars.size());
    return i ? Value::from_string(std::string(chars[*i])) : Value();
  }
  return Value();
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v,
                  const Value& step_v) {
  const auto part = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int()) throw JinjaError(std::string("slice ") + what + " must be an integer");
    return v.as_int();
  };
  const std::optional<int64_t> start_o = part(start_v, "start");
  const std::optional<int64_t> stop_o = part(stop_v, "stop");
  const int64_t step = part(step_v, "step").value_or(1);
  if (step == 0) throw JinjaError("slice step cannot be zero");

  std::vector<std::string_view> chars;
  size_t n = 0;
  if (obj.is_array()) {
    n = obj.array().size();
  } else if (obj.is_string()) {
    chars = utf8::chars(obj.str());
    n = chars.size();
  } else {
    throw JinjaError(std::string("cannot slice a ") + obj.type_name());
  }
  const auto len = static_cast<int64_t>(n);
  int64_t start = 0;
  int64_t stop = 0;
  if (step > 0) {
    start = start_o.value_or(0);
    start = start < 0 ? std::max<int64_t>(len + start, 0) : std::min(start, len);
    stop = stop_o.value_or(len);
    stop = stop < 0 ? std::max<int64_t>(len + stop, 0) : std::min(stop, len);
  } else {
    start = start_o.value_or(len - 1);
    start = start < 0 ? std::max<int64_t>(len + start, -1) : std::min(start, len - 1);
    stop = stop_o.value_or(-1);
    if (stop_o) stop = stop < 0 ? std::max<int64_t>(len + stop, -1) : std::min(stop, len - 1);
  }
  std::vector<size_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    picked.push_back(static_cast<size_t>(i));
  }
  if (obj.is_array()) {
    Array out;
    out.reserve(picked.size());
    for (size_t i : picked) out.push_back(obj.array()[i]);
    return Value::from_array(std::move(out));
  }
  std::string out;
  for (size_t i : picked) out += chars[i];
  return Value::from_string(std::move(out));
}

Value attribute_path(const Value& item, std::string_view path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part(path.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (v.is_attr_container()) {
      const Value* f = v.object().find(part);
      v = f ? *f : Value();
    } else if (v.is_array() && !part.empty() &&
               part.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = parse_index(part);
      v = i < v.array().size() ? v.array()[i] : Value();
    } else {
      return Value();
    }
    if (dot == std::string_view::npos) return v;
    start = dot + 1;
  }
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  const auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (numeric(a) && numeric(b)) {
    const double x = a.as_double();
    const double y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const std::string x = case_sensitive ? a.str() : to_lower(a.str());
    const std::string y = case_sensitive ? b.str() : to_lower(b.str());
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  throw JinjaError(std::string("cannot compare ") + a.type_name() + " with " + b.type_name());
}

Array iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kArray:
      return v.array();
    case Value::Kind::kObject: {
      Array keys;
      for (const auto& kv : v.object().items) keys.push_back(Value::from_string(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      Array chars;
      for (std::string_view c : utf8::chars(v.str()))
        chars.push_back(Value::from_string(std::string(c)));
      return chars;
    }
    default:
      throw JinjaError(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

void add_globals(Object& globals, size_t max_items) {
  globals.set(
      "namespace", bind([](CallArgs& a) {
        Object o;
        if (a.positional.size() > 1) throw JinjaError("namespace() takes at most 1 argument");
        if (!a.positional.empty()) {
          const Value& src = a.positional[0];
          if (src.is_object()) {
            o = src.object();
          } else if (src.is_array()) {
            for (const Value& pair : src.array()) {
              if (!pair.is_array() || pair.array().size() != 2 || !pair.array()[0].is_string()) {
                throw JinjaError("namespace() expects [key, value] pairs");
              }
              o.set(pair.array()[0].str(), pair.array()[1]);
            }
          } else {
            throw JinjaError("namespace() expects a mapping or key-value pairs");
          }
        }
        for (const auto& [k, v] : a.keyword) o.set(k, v);
        return Value::new_namespace(std::move(o));
      }));
  globals.set("dict", bind([](CallArgs& a) {
                Object o;
                if (!a.positional.empty()) {
                  if (!a.positional[0].is_object()) throw JinjaError("dict() expects a mapping");
                  o = a.positional[0].object();
                }
                for (const auto& [k, v] : a.keyword) o.set(k, v);
                return Value::from_object(std::move(o));
              }));
  globals.set("range", bind([max_items](CallArgs& a) {
                const auto num = [](const Value& v) {
                  if (!v.is_int()) throw JinjaError("range() arguments must be integers");
                  return v.as_int();
                };
                const size_t n = a.positional.size();
                if (n < 1 || n > 3) throw JinjaError("range() takes 1 to 3 arguments");
                const int64_t start = n >= 2 ? num(a.positional[0]) : 0;
                const int64_t stop = n >= 2 ? num(a.positional[1]) : num(a.positional[0]);
                const int64_t step = n == 3 ? num(a.positional[2]) : 1;
                if (step == 0) throw JinjaError("range() step must not be zero");
                Array out;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                  if (out.size() >= max_items) throw JinjaError("range() too long");
                  out.push_back(Value::from_int(i));
                }
                return Value::from_array(std::move(out));
              }));
  globals.set("raise_exception", bind([](CallArgs& a) -> Value {
                const Value* msg = a.get(0, "message");
                TANDEM_FAIL(kInvalidArgument, msg ? to_output_string(*msg) : std::string());
              }));
  globals.set("strftime_now", bind([](CallArgs& a) {
                const std::string fmt = want_string(a.get(0, "format"), "strftime_now() format");
                const std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                char buf[256];
                const size_t len = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
                return Value::from_string(std::string(buf, len));
              }));
}

}  // namespace tandem::jinja
