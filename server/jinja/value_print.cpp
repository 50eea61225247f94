// Printing and JSON serialisation of the Jinja engine's values, with the rules of
// @huggingface/jinja: float formatting, string escaping, `tojson` layouts, and the output string.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/tokenizer/utf8.h"
#include "server/jinja/value.h"

namespace tandem::jinja {

std::string format_float(double d, bool json) {
  if (std::isnan(d)) return json ? "NaN" : "nan";
  if (std::isinf(d)) return json ? (d > 0 ? "Infinity" : "-Infinity") : (d > 0 ? "inf" : "-inf");
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits and decimal exponent, then Python's repr() layout.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  if (sci[0] == '-') {
    out.push_back('-');
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::atoi(sci.c_str() + epos + 1);
  const int k = static_cast<int>(digits.size());
  if (exp10 < -4 || exp10 >= 16) {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + e;
  }
  if (exp10 < 0) return out + "0." + std::string(-exp10 - 1, '0') + digits;
  if (k <= exp10 + 1) return out + digits + std::string(exp10 + 1 - k, '0') + ".0";
  return out + digits.substr(0, exp10 + 1) + "." + digits.substr(exp10 + 1);
}

namespace {

void append_hex4(std::string& out, unsigned cp) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
  out += buf;
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
            append_hex4(out, c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // Strings here are valid UTF-8 (JSON input is validated, escapes are encoded by utf8::append);
    // an invalid subpart would be written as U+FFFD either way.
    const utf8::Decoded d = utf8::decode(s, i);
    const char32_t cp = d.cp;
    const size_t len = d.len;
    if (ensure_ascii) {
      if (cp >= 0x10000) {
        append_hex4(out, 0xD800 + ((cp - 0x10000) >> 10));
        append_hex4(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        append_hex4(out, cp);
      }
    } else if (d.valid) {
      out.append(s.substr(i, len));
    } else {
      utf8::append(out, utf8::kReplacementChar);
    }
    i += len;
  }
  out.push_back('"');
}

// The separators and indent of one to_json call, worked out once.
struct JsonLayout {
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  std::string unit;  // one level of indentation; empty: not pretty
  bool pretty = false;
  explicit JsonLayout(const JsonOptions& opts) {
    pretty = opts.indent.has_value() && *opts.indent > 0;
    if (opts.separators) {
      item_sep = opts.separators->first;
      key_sep = opts.separators->second;
    } else if (pretty) {
      item_sep = ",";
    }
    if (pretty) unit.assign(static_cast<size_t>(*opts.indent), ' ');
  }
  void newline(std::string& out, int depth) const {
    out.push_back('\n');
    for (int i = 0; i < depth; ++i) out += unit;
  }
};

void json_value(std::string& out, const Value& v, const JsonOptions& opts, const JsonLayout& layout,
                int depth) {
  // The text grows with every value: a small structure shared many times (x = [x, x] in a
  // loop) prints exponentially, so the size is checked as it grows, not at the end.
  check_size(out.size());
  if (depth > kMaxValueDepth) throw JinjaError("value nested too deeply to print");
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      out += opts.undefined_as_null ? "null" : "undefined";
      return;
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      out += format_float(d, /*json=*/true);
      return;
    }
    case Value::Kind::kString:
      json_string(out, v.str(), opts.ensure_ascii);
      return;
    case Value::Kind::kArray: {
      const Array& a = v.array();
      out.push_back('[');
      for (size_t i = 0; i < a.size(); ++i) {
        if (i > 0) out += layout.item_sep;
        if (layout.pretty) layout.newline(out, depth + 1);
        json_value(out, a[i], opts, layout, depth + 1);
      }
      if (layout.pretty && !a.empty()) layout.newline(out, depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::kObject:
    case Value::Kind::kNamespace: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& kv : v.object().items) entries.push_back(&kv);
      if (opts.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += layout.item_sep;
        if (layout.pretty) layout.newline(out, depth + 1);
        json_string(out, entries[i]->first, opts.ensure_ascii);
        out += layout.key_sep;
        json_value(out, entries[i]->second, opts, layout, depth + 1);
      }
      if (layout.pretty && !entries.empty()) layout.newline(out, depth);
      out.push_back('}');
      return;
    }
    case Value::Kind::kFunction:
      throw JinjaError("cannot convert a function to JSON");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_value(out, v, opts, JsonLayout(opts), 0);
  return out;
}

std::string to_output_string(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return "";
    case Value::Kind::kBool:
      return v.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return format_float(v.as_float(), /*json=*/false);
    case Value::Kind::kString:
      return v.str();
    case Value::Kind::kArray:
    case Value::Kind::kObject:
    case Value::Kind::kNamespace: {
      JsonOptions opts;
      opts.undefined_as_null = false;
      return to_json(v, opts);
    }
    case Value::Kind::kFunction:
      return "<function>";
  }
  return "";
}

}  // namespace tandem::jinja
