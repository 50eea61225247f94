// Filters and tests of the chat-template Jinja engine. Behaviour follows @huggingface/jinja
// where it implements a filter, Python Jinja2 where it does not (round, select, map by filter,
// strip characters); undefined operands act as "" or [] like Jinja2's default Undefined.
#include <algorithm>
#include <cmath>

#include "engine/tokenizer/utf8.h"
#include "server/jinja/builtins.h"
#include "server/jinja/text.h"

namespace tandem::jinja {
namespace {

const Value* arg(const CallArgs& a, size_t i, std::string_view name) { return a.get(i, name); }

bool flag(const CallArgs& a, size_t i, std::string_view name, bool fallback) {
  const Value* v = arg(a, i, name);
  if (v == nullptr || v->is_undefined() || v->is_none()) return fallback;
  return truthy(*v);
}

[[noreturn]] void bad_operand(const std::string& filter, const Value& v) {
  throw JinjaError("cannot apply filter '" + filter + "' to " + v.type_name());
}

// The string a string filter works on: undefined is "", none and containers are errors.
std::string text_of(const std::string& filter, const Value& v) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) return "";
  if (v.is_number() || v.is_bool()) return to_output_string(v);
  bad_operand(filter, v);
}

Value tojson_filter(const Value& v, const CallArgs& a) {
  JsonOptions opts;
  if (const Value* indent = arg(a, 0, "indent"); indent && !indent->is_none()) {
    if (!indent->is_int()) throw JinjaError("tojson indent must be an integer");
    opts.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
  }
  opts.ensure_ascii = flag(a, SIZE_MAX, "ensure_ascii", false);
  opts.sort_keys = flag(a, SIZE_MAX, "sort_keys", false);
  if (const Value* sep = arg(a, SIZE_MAX, "separators"); sep && !sep->is_none()) {
    if (!sep->is_array() || sep->array().size() != 2 || !sep->array()[0].is_string() ||
        !sep->array()[1].is_string()) {
      throw JinjaError("separators must be a tuple of two strings");
    }
    opts.separators = std::make_pair(sep->array()[0].str(), sep->array()[1].str());
  }
  return Value::from_string(to_json(v, opts));
}

Value sort_filter(const Value& v, const CallArgs& a) {
  const bool reverse = flag(a, 0, "reverse", false);
  const bool case_sensitive = flag(a, 1, "case_sensitive", false);
  const Value* attribute = arg(a, 2, "attribute");
  std::string attr;
  if (attribute != nullptr && attribute->is_string()) attr = attribute->str();
  if (attribute != nullptr && attribute->is_int()) attr = std::to_string(attribute->as_int());
  Array items = iterate(v);
  const auto key = [&](const Value& x) { return attr.empty() ? x : attribute_path(x, attr); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(key(x), key(y), case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::from_array(std::move(items));
}

Value dictsort_filter(const Value& v, const CallArgs& a) {
  if (!v.is_object()) bad_operand("dictsort", v);
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const Value* by = arg(a, 1, "by");
  const bool by_value = by != nullptr && by->is_string() && by->str() == "value";
  const bool reverse = flag(a, 2, "reverse", false);
  Array items;
  for (const auto& [k, x] : v.object().items) {
    items.push_back(Value::from_array({Value::from_string(k), x}));
  }
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const size_t i = by_value ? 1 : 0;
    const int c = compare_values(x.array()[i], y.array()[i], case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::from_array(std::move(items));
}

// selectattr/rejectattr (attr given) and select/reject (attr empty).
Value select_filter(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    const Value* name = arg(a, next++, "");
    if (name == nullptr || !name->is_string()) throw JinjaError("selectattr needs an attribute");
    attr = name->str();
  }
  const Value* test = arg(a, next++, "");
  CallArgs test_args;
  for (size_t i = next; i < a.positional.size(); ++i)
    test_args.positional.push_back(a.positional[i]);
  Array out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? attribute_path(item, attr) : item;
    bool pass = false;
    if (test == nullptr) {
      pass = truthy(x);
    } else {
      if (!test->is_string()) throw JinjaError("the test name must be a string");
      pass = apply_test(test->str(), x, test_args);
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::from_array(std::move(out));
}

Value map_filter(const Value& v, CallArgs& a) {
  Array out;
  if (const Value* attribute = arg(a, SIZE_MAX, "attribute")) {
    if (!attribute->is_string()) throw JinjaError("map attribute must be a string");
    const Value* fallback = arg(a, SIZE_MAX, "default");
    for (const Value& item : iterate(v)) {
      Value x = attribute_path(item, attribute->str());
      if (x.is_undefined() && fallback != nullptr) x = *fallback;
      out.push_back(std::move(x));
    }
    return Value::from_array(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) {
    throw JinjaError("map needs a filter name or attribute=");
  }
  const std::string filter = a.positional[0].str();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, rest));
  return Value::from_array(std::move(out));
}

Value indent_filter(const Value& v, const CallArgs& a) {
  std::string pad(4, ' ');
  if (const Value* width = arg(a, 0, "width")) {
    if (width->is_int()) {
      pad.assign(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 1024)), ' ');
    } else if (width->is_string()) {
      pad = width->str();
    } else {
      throw JinjaError("indent width must be an integer or a string");
    }
  }
  const bool first = flag(a, 1, "first", false);
  const bool blank = flag(a, 2, "blank", false);
  const std::string sep = "\n";
  const std::vector<std::string> lines = split(text_of("indent", v), &sep, -1);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (!((i == 0 && !first) || (lines[i].empty() && !blank))) out += pad;
    out += lines[i];
    check_size(out.size());
  }
  return Value::from_string(std::move(out));
}

Value round_filter(const Value& v, const CallArgs& a) {
  if (!v.is_number() && !v.is_bool()) bad_operand("round", v);
  const int64_t precision = arg(a, 0, "precision") && arg(a, 0, "precision")->is_int()
                                ? arg(a, 0, "precision")->as_int()
                                : 0;
  const Value* method = arg(a, 1, "method");
  const std::string how = method && method->is_string() ? method->str() : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  double r = 0;
  if (how == "common") {
    r = std::round(x);
  } else if (how == "ceil") {
    r = std::ceil(x);
  } else if (how == "floor") {
    r = std::floor(x);
  } else {
    throw JinjaError("round method must be common, ceil or floor");
  }
  return Value::from_float(r / scale);
}

Value number_filter(const std::string& name, const Value& v, const CallArgs& a) {
  const bool to_int = name == "int";
  const Value* fallback = arg(a, 0, "default");
  const Value def = fallback ? *fallback : (to_int ? Value::from_int(0) : Value::from_float(0));
  if (v.is_string()) {
    if (to_int) {
      const auto i = parse_int_prefix(v.str());
      return i ? Value::from_int(*i) : def;
    }
    const auto f = parse_float_prefix(v.str());
    return f ? Value::from_float(*f) : def;
  }
  if (v.is_bool()) return to_int ? Value::from_int(v.as_bool()) : Value::from_float(v.as_bool());
  if (v.is_int()) return to_int ? v : Value::from_float(static_cast<double>(v.as_int()));
  if (v.is_float()) {
    const double d = v.as_float();
    if (!to_int) return v;
    if (!std::isfinite(d)) return def;
    // Python's int() would give a big integer; the interpreter's are 64-bit: say so, never
    // convert out of range (undefined behaviour; found by fuzz_jinja).
    const double t = std::trunc(d);
    if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0))
      throw JinjaError("filter 'int': " + to_output_string(v) +
                       " is outside the 64-bit integer range");
    return Value::from_int(static_cast<int64_t>(t));
  }
  if (v.is_undefined() || v.is_none()) return def;
  bad_operand(name, v);
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "safe") return v;
  if (name == "tojson") return tojson_filter(v, a);
  if (name == "default" || name == "d") {
    const Value* fallback = arg(a, 0, "default_value");
    const bool boolean = flag(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) {
      return fallback ? *fallback : Value::from_string("");
    }
    return v;
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::from_int(static_cast<int64_t>(utf8::length(v.str())));
    if (v.is_array()) return Value::from_int(static_cast<int64_t>(v.array().size()));
    if (v.is_attr_container())
      return Value::from_int(static_cast<int64_t>(v.object().items.size()));
    if (v.is_undefined()) return Value::from_int(0);
    bad_operand(name, v);
  }
  if (name == "list") return Value::from_array(iterate(v));
  if (name == "first" || name == "last") {
    const Array items = iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    Array items = iterate(v);
    std::reverse(items.begin(), items.end());
    if (!v.is_string()) return Value::from_array(std::move(items));
    std::string out;
    for (const Value& c : items) out += c.str();
    return Value::from_string(std::move(out));
  }
  if (name == "sort") return sort_filter(v, a);
  if (name == "dictsort") return dictsort_filter(v, a);
  if (name == "join") {
    const Value* sep = arg(a, 0, "d");
    const std::string s = sep && sep->is_string() ? sep->str() : "";
    const Value* attribute = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += s;
      out += to_output_string(
          attribute && attribute->is_string() ? attribute_path(item, attribute->str()) : item);
      check_size(out.size());
      first = false;
    }
    return Value::from_string(std::move(out));
  }
  if (name == "string") return Value::from_string(to_output_string(v));
  if (name == "unique") {
    Array out;
    for (const Value& item : iterate(v)) {
      const bool seen =
          std::any_of(out.begin(), out.end(), [&](const Value& x) { return equals(x, item); });
      if (!seen) out.push_back(item);
    }
    return Value::from_array(std::move(out));
  }
  if (name == "upper") return Value::from_string(to_upper(text_of(name, v)));
  if (name == "lower") return Value::from_string(to_lower(text_of(name, v)));
  if (name == "title") return Value::from_string(to_title(text_of(name, v)));
  if (name == "capitalize") return Value::from_string(capitalize(text_of(name, v)));
  if (name == "trim") {
    const Value* chars = arg(a, 0, "chars");
    if (chars != nullptr && chars->is_string()) {
      return Value::from_string(strip(text_of(name, v), &chars->str(), StripSide::kBoth));
    }
    return Value::from_string(strip(text_of(name, v), nullptr, StripSide::kBoth));
  }
  if (name == "replace") {
    const Value* from = arg(a, 0, "old");
    const Value* to = arg(a, 1, "new");
    if (!from || !to || !from->is_string() || !to->is_string()) {
      throw JinjaError("replace() arguments must be strings");
    }
    const Value* n = arg(a, 2, "count");
    const int64_t count = n && n->is_int() ? n->as_int() : -1;
    return Value::from_string(replace(text_of(name, v), from->str(), to->str(), count));
  }
  if (name == "indent") return indent_filter(v, a);
  if (name == "int" || name == "float") return number_filter(name, v, a);
  if (name == "abs") {
    if (v.is_int()) return Value::from_int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value::from_float(std::fabs(v.as_float()));
    bad_operand(name, v);
  }
  if (name == "round") return round_filter(v, a);
  if (name == "bool") return Value::from_bool(truthy(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::from_array({});
    if (!v.is_attr_container()) bad_operand(name, v);
    Array out;
    for (const auto& [k, x] : v.object().items) {
      out.push_back(Value::from_array({Value::from_string(k), x}));
    }
    return Value::from_array(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr") {
    return select_filter(v, a, /*by_attr=*/true, /*keep=*/name == "selectattr");
  }
  if (name == "select" || name == "reject") {
    return select_filter(v, a, /*by_attr=*/false, /*keep=*/name == "select");
  }
  if (name == "map") return map_filter(v, a);
  if (name == "min" || name == "max") {
    const Array items = iterate(v);
    if (items.empty()) return Value();
    const bool case_sensitive = flag(a, 0, "case_sensitive", false);
    const Value* attribute = arg(a, 1, "attribute");
    const auto key = [&](const Value& x) {
      return attribute && attribute->is_string() ? attribute_path(x, attribute->str()) : x;
    };
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      const int c = compare_values(key(items[i]), key(items[best]), case_sensitive);
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    const Value* attribute = arg(a, 0, "attribute");
    const Value* start = arg(a, 1, "start");
    Value total = start ? *start : Value::from_int(0);
    for (const Value& item : iterate(v)) {
      const Value x =
          attribute && attribute->is_string() ? attribute_path(item, attribute->str()) : item;
      if (!(x.is_number() || x.is_bool()) || !(total.is_number() || total.is_bool())) {
        throw JinjaError("sum needs numbers");
      }
      if (total.is_int() && x.is_int()) {
        int64_t r = 0;
        if (!__builtin_add_overflow(total.as_int(), x.as_int(), &r)) {
          total = Value::from_int(r);
          continue;
        }
      }
      total = Value::from_float(total.as_double() + x.as_double());
    }
    return total;
  }
  if (name == "escape" || name == "e") {
    std::string out;
    for (const char c : text_of(name, v)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out.push_back(c);
      }
    }
    return Value::from_string(std::move(out));
  }
  throw JinjaError("unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  const auto other = [&]() -> const Value& {
    if (a.positional.empty()) throw JinjaError("test '" + name + "' needs an argument");
    return a.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "iterable") return v.is_array() || v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "callable") return v.is_function();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) throw JinjaError("cannot test " + name + " on " + v.type_name());
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& d = other();
    if (!v.is_int() || !d.is_int() || d.as_int() == 0) throw JinjaError("bad divisibleby operands");
    return v.as_int() % d.as_int() == 0;
  }
  if (name == "lower") return v.is_string() && to_lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && to_upper(v.str()) == v.str();
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
    return equals(v, other());
  }
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "gt" || name == "greaterthan") return compare_values(v, other(), true) > 0;
  if (name == "ge") return compare_values(v, other(), true) >= 0;
  if (name == "lt" || name == "lessthan") return compare_values(v, other(), true) < 0;
  if (name == "le") return compare_values(v, other(), true) <= 0;
  if (name == "in") {
    const Value& seq = other();
    if (seq.is_string() && v.is_string()) return seq.str().find(v.str()) != std::string::npos;
    if (seq.is_attr_container() && v.is_string()) return seq.object().find(v.str()) != nullptr;
    for (const Value& x : iterate(seq)) {
      if (equals(x, v)) return true;
    }
    return false;
  }
  throw JinjaError("unknown test '" + name + "'");
}

}  // namespace tandem::jinja
