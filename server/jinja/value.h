// Values of the chat-template Jinja engine: the dynamic type every expression evaluates to,
// conversion from JSON, truthiness, equality, and the printing rules of @huggingface/jinja
// (the reference the fixtures are generated with). Strings are UTF-8; objects keep insertion
// order; arrays, strings and objects are shared, so copying a Value is cheap.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tandem::jinja {

// A runtime error raised inside a builtin (filter, test, method); the interpreter adds the
// template line and turns it into a tandem::Error.
class JinjaError : public std::runtime_error {
 public:
  explicit JinjaError(const std::string& msg) : std::runtime_error(msg) {}
};

// No string a template builds (the output included) may exceed this; see check_size().
constexpr size_t kMaxStringBytes = size_t{16} << 20;
// Arrays and objects nested deeper than this (a template can nest them without bound, e.g.
// `set x = [x]` in a loop, or make them contain themselves) are refused by the recursive walks:
// printing, tojson, comparison.
constexpr int kMaxValueDepth = 512;
// Throws JinjaError when a string of n bytes would exceed kMaxStringBytes.
void check_size(size_t n);

class Value;
using Array = std::vector<Value>;

// An insertion-ordered string-keyed map (the JSON objects of a chat context are small).
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
};

// Arguments of a call: positional values, then keyword values in call order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The i-th positional argument, else the keyword argument `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
};

using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,  // namespace(): a mutable object that is not a mapping
    kFunction,
  };

  Value() = default;  // undefined
  // A deep chain of arrays/objects is freed without one stack frame per level (release()).
  ~Value() {
    if (kind_ == Kind::kArray || kind_ == Kind::kObject || kind_ == Kind::kNamespace) release();
  }
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value& other) {
    Value copy(other);
    swap(copy);  // the old value is freed by ~Value
    return *this;
  }
  Value& operator=(Value&& other) noexcept {
    Value taken(std::move(other));
    swap(taken);
    return *this;
  }
  void swap(Value& other) noexcept {
    std::swap(kind_, other.kind_);
    data_.swap(other.data_);
  }
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double f);
  static Value from_string(std::string s);
  static Value from_array(Array a);
  static Value from_object(Object o);
  static Value new_namespace(Object o);
  static Value from_function(Function fn);
  // Converts a JSON value; object key order is the JSON's iteration order.
  template <typename Json>
  static Value from_json(const Json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_attr_container() const { return is_object() || is_namespace(); }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // A number (int, float or bool) as a double.
  double as_double() const;
  const std::string& str() const { return *std::get<StrPtr>(data_); }
  const Array& array() const { return *std::get<ArrPtr>(data_); }
  // Lists and dicts are shared like Python's: list.append / dict.update change every holder.
  Array& array_mut() const { return *std::get<ArrPtr>(data_); }
  const Object& object() const { return *std::get<ObjPtr>(data_); }
  Object& object_mut() const { return *std::get<ObjPtr>(data_); }
  const Function& function() const { return *std::get<FnPtr>(data_); }

  // Name of the kind for error messages ("string", "array", ...).
  const char* type_name() const;

 private:
  using StrPtr = std::shared_ptr<const std::string>;
  using ArrPtr = std::shared_ptr<Array>;
  using ObjPtr = std::shared_ptr<Object>;
  using FnPtr = std::shared_ptr<const Function>;

  // When this is the last holder of its array/object, moves the nested containers out into a
  // work list and frees them one by one.
  void release() noexcept;

  Kind kind_ = Kind::kUndefined;
  std::variant<std::monostate, bool, int64_t, double, StrPtr, ArrPtr, ObjPtr, FnPtr> data_;
};

// What one render may allocate, and reference cycles. jinja::render() holds a RenderArena on its
// thread for the whole render; outside one nothing is counted or recorded.
//  - Work: the bytes of all strings a render makes are counted; past kMaxStringWork it fails
//    (the step limit counts loop iterations, not what each iteration builds: a loop of 1M steps
//    each making a 16 MiB string would otherwise run for hours).
//  - Cycles: a template can make a list or namespace contain itself (`a.append(a)`, `ns.me =
//    ns`), which shared ownership never frees. The arrays and objects made during the render are
//    recorded (weakly); the destructor empties those still alive, which breaks the cycles. After
//    a render the only survivors are cycles and values the template stored into the caller's
//    context (also emptied).
constexpr size_t kMaxStringWork = size_t{256} << 20;

class RenderArena {
 public:
  RenderArena();
  ~RenderArena();
  RenderArena(const RenderArena&) = delete;
  RenderArena& operator=(const RenderArena&) = delete;

  // Called by Value::from_array / from_object / new_namespace.
  static void record(const std::shared_ptr<Array>& a);
  static void record(const std::shared_ptr<Object>& o);
  // Called by Value::from_string; throws JinjaError past kMaxStringWork.
  static void charge_string(size_t bytes);

 private:
  size_t string_bytes_ = 0;
  void compact();
  std::vector<std::weak_ptr<Array>> arrays_;
  std::vector<std::weak_ptr<Object>> objects_;
  size_t compact_at_ = 1024;  // entries before expired ones are dropped (doubles)
  RenderArena* outer_;
};

// Python truthiness: undefined/none/false/0/""/[]/{} are false.
bool truthy(const Value& v);
// `==` of the reference: numbers by value (bool counts as 0/1), strings by content, arrays
// and objects deeply, none == undefined.
bool equals(const Value& a, const Value& b);

// How `{{ v }}` prints: strings as is, true/false, ints in decimal, floats like Python's repr
// ("2.0", "0.5"), arrays/objects as JSON (undefined inside them as `undefined`), none and
// undefined as "".
std::string to_output_string(const Value& v);

struct JsonOptions {
  std::optional<int> indent;  // pretty-print with this many spaces per level
  bool ensure_ascii = false;  // escape non-ASCII as \uXXXX (UTF-16 units)
  bool sort_keys = false;
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool undefined_as_null = true;  // false: `undefined` (how arrays/objects print)
};
// `|tojson`: Python json.dumps(ensure_ascii=False) layout: ", " and ": " separators, ","
// between items when indenting, non-ASCII kept.
std::string to_json(const Value& v, const JsonOptions& opts = {});

// Python's repr() of a float (shortest round trip: 0.5, 2.0, 1e-05, 1e+16); `json` spells the
// non-finite values like json.dumps (NaN, Infinity) instead of nan/inf.
std::string format_float(double d, bool json);

// ----------------------------------------------------------------------------------------

template <typename Json>
Value Value::from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return none();
    case Json::value_t::boolean:
      return from_bool(j.template get<bool>());
    case Json::value_t::number_integer:
      return from_int(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return from_float(static_cast<double>(u));
      return from_int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return from_float(j.template get<double>());
    case Json::value_t::string:
      return from_string(j.template get<std::string>());
    case Json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& x : j) a.push_back(from_json(x));
      return from_array(std::move(a));
    }
    case Json::value_t::object: {
      Object o;
      o.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) o.items.emplace_back(it.key(), from_json(*it));
      return from_object(std::move(o));
    }
    default:
      return Value();  // binary / discarded: undefined
  }
}

}  // namespace tandem::jinja
