// Binary operators of the chat-template Jinja engine (see server/jinja/operators.h).
#include "server/jinja/operators.h"

#include <algorithm>
#include <cmath>

#include "server/jinja/builtins.h"

namespace tandem::jinja {
namespace {

// Python semantics for the arithmetic of two numbers; ints overflow into floats.
Value arithmetic(const std::string& op, const Value& l, const Value& r) {
  const bool ints = (l.is_int() || l.is_bool()) && (r.is_int() || r.is_bool());
  const double x = l.as_double();
  const double y = r.as_double();
  if (ints) {
    const int64_t a = l.is_bool() ? l.as_bool() : l.as_int();
    const int64_t b = r.is_bool() ? r.as_bool() : r.as_int();
    int64_t res = 0;
    if (op == "+" && !__builtin_add_overflow(a, b, &res)) return Value::from_int(res);
    if (op == "-" && !__builtin_sub_overflow(a, b, &res)) return Value::from_int(res);
    if (op == "*" && !__builtin_mul_overflow(a, b, &res)) return Value::from_int(res);
    if (op == "//" || op == "%") {
      if (b == 0) throw JinjaError("integer division or modulo by zero");
      if (a == INT64_MIN && b == -1) return Value::from_float(op == "//" ? -x : 0.0);
      int64_t q = a / b;
      int64_t m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) {
        --q;
        m += b;
      }
      return Value::from_int(op == "//" ? q : m);
    }
    if (op == "**" && b >= 0) {
      int64_t acc = 1;
      bool overflow = false;
      for (int64_t i = 0; i < b && !overflow; ++i) {
        overflow = __builtin_mul_overflow(acc, a, &acc);
        if (acc == 0 || acc == 1) break;
      }
      if (!overflow) {
        if (acc == 1 && a == -1) acc = (b % 2 == 0) ? 1 : -1;
        return Value::from_int(acc);
      }
    }
  }
  if (op == "+") return Value::from_float(x + y);
  if (op == "-") return Value::from_float(x - y);
  if (op == "*") return Value::from_float(x * y);
  if (op == "/") {
    if (y == 0) throw JinjaError("division by zero");
    return Value::from_float(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) throw JinjaError("float division or modulo by zero");
    if (op == "//") return Value::from_float(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::from_float(m);
  }
  if (op == "**") {
    if (x == 0 && y < 0) throw JinjaError("0.0 cannot be raised to a negative power");
    const double p = std::pow(x, y);
    if (!std::isfinite(p)) throw JinjaError("exponentiation result is not a finite real number");
    return Value::from_float(p);
  }
  throw JinjaError("unknown operator '" + op + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string()) throw JinjaError("'in <string>' requires a string on the left");
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_attr_container()) {
    return item.is_string() && container.object().find(item.str()) != nullptr;
  }
  if (container.is_array()) {
    for (const Value& x : container.array()) {
      if (equals(x, item)) return true;
    }
    return false;
  }
  throw JinjaError(std::string("argument of type '") + container.type_name() + "' is not iterable");
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  const size_t len = seq.is_string() ? seq.str().size() : seq.array().size();
  // The size is multiplied with an overflow check ('abcd' * 2**62 wraps around to 0), and an
  // empty sequence is not looped over n times ('' * 2**63 would never end).
  size_t total = 0;
  if (__builtin_mul_overflow(len, static_cast<uint64_t>(n), &total) || total > kMaxStringBytes)
    throw JinjaError(seq.is_string() ? "string too long (limit 16 MiB)"
                                     : "list repetition too long");
  if (total == 0) return seq.is_string() ? Value::from_string("") : Value::from_array({});
  if (seq.is_string()) {
    std::string out;
    out.reserve(total);
    out = seq.str();
    while (out.size() < total) out.append(out, 0, std::min(out.size(), total - out.size()));
    return Value::from_string(std::move(out));
  }
  Array out;
  out.reserve(total);
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.array().begin(), seq.array().end());
  return Value::from_array(std::move(out));
}

}  // namespace

Value binary_op(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return Value::from_bool(equals(l, r));
  if (op == "!=") return Value::from_bool(!equals(l, r));
  if (op == "in") return Value::from_bool(contains(r, l));
  if (op == "not in") return Value::from_bool(!contains(r, l));
  if (op == "~") {
    std::string s = to_output_string(l);
    s += to_output_string(r);
    check_size(s.size());
    return Value::from_string(std::move(s));
  }
  if (l.is_undefined() || r.is_undefined()) {
    throw JinjaError("cannot apply '" + op + "' to an undefined value");
  }
  if (l.is_none() || r.is_none()) throw JinjaError("cannot apply '" + op + "' to none");
  const auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  const bool cmp = op == "<" || op == ">" || op == "<=" || op == ">=";
  if (numeric(l) && numeric(r)) {
    if (!cmp) return arithmetic(op, l, r);
    const double x = l.as_double();
    const double y = r.as_double();
    return Value::from_bool(op == "<" ? x < y : op == ">" ? x > y : op == "<=" ? x <= y : x >= y);
  }
  if (cmp && l.is_string() && r.is_string()) {
    const int c = l.str().compare(r.str());
    return Value::from_bool(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  if (op == "+") {
    if (l.is_array() && r.is_array()) {
      Array out = l.array();
      out.insert(out.end(), r.array().begin(), r.array().end());
      return Value::from_array(std::move(out));
    }
    if (l.is_string() || r.is_string()) {
      std::string s = to_output_string(l);
      s += to_output_string(r);
      check_size(s.size());
      return Value::from_string(std::move(s));
    }
  }
  if (op == "*") {
    if ((l.is_string() || l.is_array()) && r.is_int()) return repeat(l, r.as_int());
    if ((r.is_string() || r.is_array()) && l.is_int()) return repeat(r, l.as_int());
  }
  throw JinjaError("unsupported operand types for '" + op + "': " + l.type_name() + " and " +
                   r.type_name());
}

}  // namespace tandem::jinja
