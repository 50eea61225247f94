// Values of the chat-template Jinja engine: construction, truthiness and equality (printing and
// JSON serialisation: value_print.cpp).
#include "server/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/tokenizer/utf8.h"

namespace tandem::jinja {

void check_size(size_t n) {
  if (n > kMaxStringBytes) throw JinjaError("string too long (limit 16 MiB)");
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Object::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::set(const std::string& key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
  } else {
    items.emplace_back(key, std::move(value));
  }
}

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < positional.size()) return &positional[i];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Value::release() noexcept {
  std::vector<Value> pending;
  // Takes the children of v's container when v holds the only reference; v's own container is
  // then freed without recursion (its children are empty or scalars).
  const auto take = [&pending](Value& v) {
    if (auto* a = std::get_if<ArrPtr>(&v.data_); a && *a && a->use_count() == 1) {
      for (Value& x : **a)
        if (x.kind_ == Kind::kArray || x.kind_ == Kind::kObject || x.kind_ == Kind::kNamespace)
          pending.push_back(std::move(x));
    } else if (auto* o = std::get_if<ObjPtr>(&v.data_); o && *o && o->use_count() == 1) {
      for (auto& kv : (*o)->items) {
        Value& x = kv.second;
        if (x.kind_ == Kind::kArray || x.kind_ == Kind::kObject || x.kind_ == Kind::kNamespace)
          pending.push_back(std::move(x));
      }
    }
  };
  take(*this);
  Value v;
  while (!pending.empty()) {
    v.swap(pending.back());
    pending.pop_back();
    take(v);
    // Frees v's container now: its nested containers were moved out above.
    v.data_ = std::monostate{};
    v.kind_ = Kind::kUndefined;
  }
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::from_bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}

Value Value::from_int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}

Value Value::from_float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = f;
  return v;
}

Value Value::from_string(std::string s) {
  RenderArena::charge_string(s.size());
  Value v;
  v.kind_ = Kind::kString;
  v.data_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::from_array(Array a) {
  Value v;
  v.kind_ = Kind::kArray;
  auto p = std::make_shared<Array>(std::move(a));
  RenderArena::record(p);
  v.data_ = std::move(p);
  return v;
}

Value Value::from_object(Object o) {
  Value v;
  v.kind_ = Kind::kObject;
  auto p = std::make_shared<Object>(std::move(o));
  RenderArena::record(p);
  v.data_ = std::move(p);
  return v;
}

Value Value::new_namespace(Object o) {
  Value v;
  v.kind_ = Kind::kNamespace;
  auto p = std::make_shared<Object>(std::move(o));
  RenderArena::record(p);
  v.data_ = std::move(p);
  return v;
}

namespace {
thread_local RenderArena* active_arena = nullptr;
}  // namespace

RenderArena::RenderArena() : outer_(active_arena) { active_arena = this; }

RenderArena::~RenderArena() {
  active_arena = outer_;
  // Moving the contents out first: the survivors' values are freed here, one at a time
  // (Value::release keeps deep chains off the stack).
  for (const auto& w : arrays_) {
    if (const auto a = w.lock()) {
      const Array gone = std::move(*a);
    }
  }
  for (const auto& w : objects_) {
    if (const auto o = w.lock()) {
      const Object gone = std::move(*o);
    }
  }
}

void RenderArena::record(const std::shared_ptr<Array>& a) {
  if (active_arena == nullptr) return;
  active_arena->arrays_.push_back(a);
  active_arena->compact();
}

void RenderArena::charge_string(size_t bytes) {
  if (active_arena == nullptr) return;
  active_arena->string_bytes_ += bytes;
  if (active_arena->string_bytes_ > kMaxStringWork)
    throw JinjaError("the template built more than 256 MiB of strings");
}

void RenderArena::record(const std::shared_ptr<Object>& o) {
  if (active_arena == nullptr) return;
  active_arena->objects_.push_back(o);
  active_arena->compact();
}

// Drops the entries of freed containers once the lists have doubled: the lists stay
// proportional to the live containers however many a loop makes and drops.
void RenderArena::compact() {
  if (arrays_.size() + objects_.size() < compact_at_) return;
  std::erase_if(arrays_, [](const auto& w) { return w.expired(); });
  std::erase_if(objects_, [](const auto& w) { return w.expired(); });
  compact_at_ = std::max<size_t>(1024, 2 * (arrays_.size() + objects_.size()));
}

Value Value::from_function(Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.data_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::kBool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(as_int());
    case Kind::kFloat:
      return as_float();
    default:
      throw JinjaError(std::string("expected a number, got ") + type_name());
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return "array";
    case Kind::kObject:
      return "object";
    case Kind::kNamespace:
      return "namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0 && !std::isnan(v.as_float());
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kArray:
      return !v.array().empty();
    case Value::Kind::kObject:
      return !v.object().items.empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

namespace {

bool equals_at(const Value& a, const Value& b, int depth);

}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

namespace {

bool equals_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) throw JinjaError("value nested too deeply to compare");
  const auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (numeric(a) && numeric(b)) return a.as_double() == b.as_double();
  const auto nullish = [](const Value& v) { return v.is_none() || v.is_undefined(); };
  if (nullish(a) || nullish(b)) return nullish(a) && nullish(b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kArray: {
      const Array& x = a.array();
      const Array& y = b.array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals_at(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kObject: {
      const Object& x = a.object();
      const Object& y = b.object();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (w == nullptr || !equals_at(v, *w, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.object() == &b.object();
    case Value::Kind::kFunction:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

}  // namespace

}  // namespace tandem::jinja
