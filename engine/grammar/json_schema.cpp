// The JSON Schema compiler (engine/grammar/json_schema.h): one recursive walk of the schema that
// emits rules through JsonParts. Templated on the JSON type so that a schema parsed into
// nlohmann::ordered_json keeps its properties in declared order (nlohmann::json sorts keys).
#include "engine/grammar/json_schema.h"

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/grammar/json_parts.h"
#include "kernels/common.h"
#include "kernels/json_depth.h"

namespace tandem::grammar {

namespace {

// Keywords that change which instances are valid and that this compiler cannot express.
constexpr const char* kUnsupportedKeywords[] = {"patternProperties",
                                                "not",
                                                "if",
                                                "then",
                                                "else",
                                                "dependentRequired",
                                                "dependentSchemas",
                                                "dependencies",
                                                "multipleOf",
                                                "propertyNames",
                                                "contains",
                                                "minContains",
                                                "maxContains",
                                                "unevaluatedProperties",
                                                "unevaluatedItems",
                                                "prefixItems",
                                                "minProperties",
                                                "maxProperties",
                                                "$dynamicRef",
                                                "$recursiveRef"};

// Formats as anchored patterns (no leap days or leap seconds: always valid, nearly complete).
const char* format_regex(const std::string& f) {
#define TANDEM_DATE \
  "[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)"
#define TANDEM_TIME \
  "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
  if (f == "date") return TANDEM_DATE;
  if (f == "time") return TANDEM_TIME;
  if (f == "date-time") return TANDEM_DATE "T" TANDEM_TIME;
#undef TANDEM_DATE
#undef TANDEM_TIME
  if (f == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  if (f == "email")
    return "[A-Za-z0-9_%+-]{1,32}(\\.[A-Za-z0-9_%+-]{1,32}){0,3}@([A-Za-z0-9]([A-Za-z0-9-]{0,20}"
           "[A-Za-z0-9])?\\.){1,4}[A-Za-z]{2,10}";
  if (f == "ipv4")
    return "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|"
           "[1-9]?[0-9])){3}";
  return nullptr;
}

// Bounds beyond this are refused (the number grammar caps integer parts at 16 digits).
constexpr double kMaxBound = 1e15;

template <class Json>
class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& root) : root_(root), parts_(b_) {}

  std::shared_ptr<const Grammar> run() {
    const Elem r = compile(root_, 0);
    return b_.finish(r);
  }

 private:
  Elem compile(const Json& s, int depth) {
    TANDEM_REQUIRE(depth <= kMaxSchemaDepth, kInvalidArgument, "JSON Schema nested deeper than ",
                   kMaxSchemaDepth);
    if (s.is_boolean()) return s.template get<bool>() ? parts_.value() : b_.rule("nothing", {});
    TANDEM_REQUIRE(s.is_object(), kInvalidArgument,
                   "a JSON Schema must be an object or a boolean, got ", s.type_name());
    for (const char* k : kUnsupportedKeywords)
      TANDEM_REQUIRE(!s.contains(k), kUnsupported, "unsupported JSON Schema keyword '", k, "'");
    if (const auto u = s.find("uniqueItems");
        u != s.end() && u->is_boolean() && u->template get<bool>())
      TANDEM_FAIL(kUnsupported, "unsupported JSON Schema keyword 'uniqueItems' (true)");

    std::vector<Seq> alts;
    if (const auto r = s.find("$ref"); r != s.end()) {
      alts.push_back({ref(*r, depth)});
    } else if (const auto c = s.find("const"); c != s.end()) {
      alts.push_back({parts_.literal(c->dump())});
    } else if (const auto e = s.find("enum"); e != s.end()) {
      TANDEM_REQUIRE(e->is_array(), kInvalidArgument, "JSON Schema 'enum' must be an array");
      std::vector<std::string> values;
      for (const Json& v : *e) values.push_back(v.dump());
      // One trie: a long enum costs one matcher stack, not one per value.
      if (!values.empty()) alts.push_back({parts_.literal_set(values)});
    } else if (const auto all = s.find("allOf"); all != s.end()) {
      TANDEM_REQUIRE(all->is_array() && all->size() == 1, kUnsupported,
                     "unsupported JSON Schema keyword 'allOf' (with more than one schema)");
      alts.push_back({compile(merged(without(s, "allOf"), (*all)[0]), depth + 1)});
    } else if (s.contains("anyOf") || s.contains("oneOf")) {
      TANDEM_REQUIRE(!(s.contains("anyOf") && s.contains("oneOf")), kUnsupported,
                     "unsupported JSON Schema keyword 'oneOf' (together with 'anyOf')");
      const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
      const Json& branches = s.at(key);
      TANDEM_REQUIRE(branches.is_array() && !branches.empty(), kInvalidArgument, "JSON Schema '",
                     key, "' must be a non-empty array");
      // Keywords beside anyOf apply to every branch: merged in (exact when they do not clash).
      const Json rest = without(s, key);
      const bool plain = !has_validation(rest);
      for (const Json& br : branches)
        alts.push_back({compile(plain ? br : merged(rest, br), depth + 1)});
    } else {
      for (const std::string& t : types(s)) alts.push_back({typed(s, t, depth)});
    }
    if (const auto n = s.find("nullable");
        n != s.end() && n->is_boolean() && n->template get<bool>())
      alts.push_back({parts_.null()});
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    return b_.rule("schema", std::move(alts));
  }

  static Json without(const Json& s, const char* key) {
    Json out = s;
    out.erase(key);
    return out;
  }
  static Json merged(const Json& base, const Json& over) {
    if (over.is_boolean()) return over.template get<bool>() ? base : over;
    Json out = base;
    if (over.is_object())
      for (auto it = over.begin(); it != over.end(); ++it) out[it.key()] = it.value();
    return out;
  }
  static bool has_validation(const Json& s) {
    static const std::set<std::string> kAnnotations = {
        "title", "description", "examples",   "default",  "$schema",   "$id",    "$comment",
        "$defs", "definitions", "deprecated", "readOnly", "writeOnly", "$anchor"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kAnnotations.count(it.key())) return true;
    return false;
  }

  std::vector<std::string> types(const Json& s) {
    const auto t = s.find("type");
    if (t == s.end()) {
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
          if (s.contains(k)) return true;
        return false;
      };
      if (has({"properties", "additionalProperties", "required"})) return {"object"};
      if (has({"items", "minItems", "maxItems"})) return {"array"};
      if (has({"pattern", "minLength", "maxLength", "format"})) return {"string"};
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) return {"number"};
      return {"any"};
    }
    if (t->is_string()) return {t->template get<std::string>()};
    TANDEM_REQUIRE(t->is_array() && !t->empty(), kInvalidArgument,
                   "JSON Schema 'type' must be a string or a non-empty array");
    std::vector<std::string> out;
    for (const Json& x : *t) {
      TANDEM_REQUIRE(x.is_string(), kInvalidArgument, "JSON Schema 'type' entries must be strings");
      out.push_back(x.template get<std::string>());
    }
    return out;
  }

  Elem typed(const Json& s, const std::string& t, int depth) {
    if (t == "any") return parts_.value();
    if (t == "null") return parts_.null();
    if (t == "boolean") return parts_.boolean();
    if (t == "string") return string_schema(s);
    if (t == "integer") return integer_schema(s);
    if (t == "number") return number_schema(s);
    if (t == "object") return object_schema(s, depth);
    if (t == "array") return array_schema(s, depth);
    TANDEM_FAIL(kInvalidArgument, "unknown JSON Schema type '", t, "'");
  }

  std::optional<uint32_t> count(const Json& s, const char* key) {
    const auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    TANDEM_REQUIRE(it->is_number_unsigned() || (it->is_number_integer() && *it >= 0),
                   kInvalidArgument, "JSON Schema '", key, "' must be a non-negative integer");
    const uint64_t v = it->template get<uint64_t>();
    TANDEM_REQUIRE(v <= kMaxCount, kInvalidArgument, "JSON Schema '", key, "' ", v,
                   " is above the limit ", kMaxCount);
    return static_cast<uint32_t>(v);
  }

  Elem string_schema(const Json& s) {
    const auto min = count(s, "minLength");
    const auto max = count(s, "maxLength");
    const auto p = s.find("pattern");
    const auto f = s.find("format");
    const char* fre =
        f != s.end() && f->is_string() ? format_regex(f->template get<std::string>()) : nullptr;
    if (p != s.end() || fre) {
      TANDEM_REQUIRE(!min && !max, kUnsupported, "unsupported JSON Schema keyword '",
                     min ? "minLength" : "maxLength", "' (together with pattern or format)");
      TANDEM_REQUIRE(p == s.end() || !fre, kUnsupported,
                     "unsupported JSON Schema keyword 'format' (together with pattern)");
      Elem body;
      if (p != s.end()) {
        TANDEM_REQUIRE(p->is_string(), kInvalidArgument, "JSON Schema 'pattern' must be a string");
        body = parts_.pattern(p->template get<std::string>());
      } else {
        body = parts_.regex_exact(fre);
      }
      return b_.rule("string", {{b_.byte('"'), body, b_.byte('"')}});
    }
    if (!min && !max) return parts_.string();
    return parts_.string_len(min.value_or(0), max ? *max : kUnbounded);
  }

  // A bound as (value, exclusive): `minimum` and `exclusiveMinimum` (a number, or draft 4's
  // boolean modifier), the stricter one when both are given.
  std::optional<std::pair<double, bool>> bound(const Json& s, bool lower) {
    const char* inc = lower ? "minimum" : "maximum";
    const char* exc = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<std::pair<double, bool>> b;
    auto take = [&](double v, bool excl) {
      TANDEM_REQUIRE(std::isfinite(v) && std::fabs(v) <= kMaxBound, kInvalidArgument,
                     "JSON Schema '", excl ? exc : inc, "' beyond +-", kMaxBound);
      const bool stricter =
          !b || (lower ? v > b->first : v < b->first) || (v == b->first && excl && !b->second);
      if (stricter) b = std::make_pair(v, excl);
    };
    const auto i = s.find(inc);
    const auto e = s.find(exc);
    const bool draft4 = e != s.end() && e->is_boolean() && e->template get<bool>();
    if (i != s.end()) {
      TANDEM_REQUIRE(i->is_number(), kInvalidArgument, "JSON Schema '", inc, "' must be a number");
      take(i->template get<double>(), draft4);
    }
    if (e != s.end() && e->is_number()) take(e->template get<double>(), true);
    return b;
  }

  Elem integer_schema(const Json& s) {
    std::optional<int64_t> lo, hi;
    if (const auto b = bound(s, true))
      lo = static_cast<int64_t>(b->second ? std::floor(b->first) + 1 : std::ceil(b->first));
    if (const auto b = bound(s, false))
      hi = static_cast<int64_t>(b->second ? std::ceil(b->first) - 1 : std::floor(b->first));
    if (!lo && !hi) return parts_.integer();
    return parts_.integer_range(lo, hi);
  }

  Elem number_schema(const Json& s) {
    // A fractional bound becomes the next integer inward, inclusive: still only valid numbers.
    std::optional<int64_t> lo, hi;
    bool lo_excl = false, hi_excl = false;
    if (const auto b = bound(s, true)) {
      const bool integral = std::floor(b->first) == b->first;
      lo = static_cast<int64_t>(std::ceil(b->first));
      lo_excl = integral && b->second;
    }
    if (const auto b = bound(s, false)) {
      const bool integral = std::floor(b->first) == b->first;
      hi = static_cast<int64_t>(std::floor(b->first));
      hi_excl = integral && b->second;
    }
    return parts_.number_range(lo, lo_excl, hi, hi_excl);
  }

  Elem array_schema(const Json& s, int depth) {
    const auto min = count(s, "minItems");
    const auto max = count(s, "maxItems");
    TANDEM_REQUIRE(!min || !max || *min <= *max, kInvalidArgument,
                   "JSON Schema minItems above maxItems");
    std::optional<Elem> item;
    const auto it = s.find("items");
    if (it == s.end()) {
      item = parts_.value();
    } else {
      TANDEM_REQUIRE(!it->is_array(), kUnsupported,
                     "unsupported JSON Schema keyword 'items' (array form)");
      if (!it->is_boolean() || it->template get<bool>()) item = compile(*it, depth + 1);
    }
    const Elem ws = parts_.ws();
    std::vector<Seq> alts;
    if (!min || *min == 0) alts.push_back({b_.byte('['), ws, b_.byte(']')});
    if (item && (!max || *max > 0)) {
      const uint32_t lo = min && *min > 0 ? *min - 1 : 0;
      const uint32_t hi = max ? *max - 1 : kUnbounded;
      const Elem more = b_.repeat("items", {parts_.sep(), *item}, lo, hi);
      alts.push_back({b_.byte('['), ws, *item, more, ws, b_.byte(']')});
    }
    return b_.rule("array", std::move(alts));
  }

  Elem object_schema(const Json& s, int depth) {
    struct Prop {
      std::string name;
      Elem value;
      bool required;
    };
    std::set<std::string> required;
    if (const auto r = s.find("required"); r != s.end()) {
      TANDEM_REQUIRE(r->is_array(), kInvalidArgument, "JSON Schema 'required' must be an array");
      for (const Json& n : *r) {
        TANDEM_REQUIRE(n.is_string(), kInvalidArgument,
                       "JSON Schema 'required' entries must be strings");
        required.insert(n.template get<std::string>());
      }
    }
    std::vector<Prop> props;
    std::set<std::string> declared;
    if (const auto p = s.find("properties"); p != s.end()) {
      TANDEM_REQUIRE(p->is_object(), kInvalidArgument,
                     "JSON Schema 'properties' must be an object");
      for (auto it = p->begin(); it != p->end(); ++it) {
        props.push_back({it.key(), compile(it.value(), depth + 1), required.count(it.key()) > 0});
        declared.insert(it.key());
      }
    }
    for (const std::string& r : required)
      if (!declared.count(r)) {
        props.push_back({r, parts_.value(), true});
        declared.insert(r);
      }

    std::optional<Elem> extra;  // one more "key": value pair
    const auto ap = s.find("additionalProperties");
    // Absent: extra members only when no property is declared (a bare {"type": "object"} asks for
    // any object). With declared properties the output has those only, as xgrammar's strict mode
    // and OpenAI's structured outputs do: still valid, and a model that rambles cannot add keys
    // until max_tokens cuts the document.
    const bool open = ap == s.end() ? declared.empty() && props.empty()
                                    : !ap->is_boolean() || ap->template get<bool>();
    if (open) {
      const Elem value =
          ap == s.end() || ap->is_boolean() ? parts_.value() : compile(*ap, depth + 1);
      const Elem key = declared.empty() ? parts_.string() : other_key(declared);
      extra = b_.rule("extra_member", {{key, parts_.colon(), value}});
    }
    const Elem sep = parts_.sep();
    // tail[first]: what may follow when no member was written yet (first) or some was.
    std::optional<Elem> tail_first, tail_rest;
    if (extra) {
      tail_rest = b_.repeat("extra_members", {sep, *extra}, 0, kUnbounded);
      tail_first = b_.rule("extra_first", {{}, {*extra, *tail_rest}});
    }
    for (size_t i = props.size(); i-- > 0;) {
      const Prop& p = props[i];
      const Elem kv =
          b_.rule("member", {{parts_.literal(Json(p.name).dump()), parts_.colon(), p.value}});
      auto then = [](Seq s0, const std::optional<Elem>& t) {
        if (t) s0.push_back(*t);
        return s0;
      };
      std::vector<Seq> rest_alts{then({sep, kv}, tail_rest)};
      std::vector<Seq> first_alts{then({kv}, tail_rest)};
      if (!p.required) {
        rest_alts.push_back(then({}, tail_rest));
        first_alts.push_back(then({}, tail_first));
      }
      const Elem rest = b_.rule("members", std::move(rest_alts));
      tail_first = b_.rule("members_first", std::move(first_alts));
      tail_rest = rest;
    }
    const Elem ws = parts_.ws();
    Seq body{b_.byte('{'), ws};
    if (tail_first) body.push_back(*tail_first);
    body.push_back(ws);
    body.push_back(b_.byte('}'));
    return b_.rule("object", {body});
  }

  // A key that is none of the declared names: printable ASCII without escapes, at most 64
  // characters past the names' common prefix (the complement of the names' trie).
  Elem other_key(const std::set<std::string>& names) {
    ByteSet allowed;
    allowed.add_range(0x20, 0x7E);
    allowed.w[0] &= ~(uint64_t{1} << '"');
    allowed.w[1] &= ~(uint64_t{1} << ('\\' - 64));
    const Elem free_tail = b_.rule(
        "key_tail", {{b_.repeat("key_chars", {b_.byte_class(allowed)}, 0, 64), b_.byte('"')}});
    struct Node {
      std::map<uint8_t, size_t> kids;
      bool end = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      bool ascii = true;
      for (char c : n) ascii = ascii && allowed.has(static_cast<uint8_t>(c));
      if (!ascii) continue;  // cannot be written with the allowed characters anyway
      size_t at = 0;
      for (char c : n) {
        const auto [it, added] = trie[at].kids.emplace(static_cast<uint8_t>(c), trie.size());
        if (added) trie.emplace_back();
        at = it->second;
      }
      trie[at].end = true;
    }
    std::function<Elem(size_t)> node_rule = [&](size_t at) {
      std::vector<Seq> alts;
      if (!trie[at].end) alts.push_back({b_.byte('"')});
      ByteSet others = allowed;
      for (const auto& [c, kid] : trie[at].kids) {
        others.w[c >> 6] &= ~(uint64_t{1} << (c & 63));
        alts.push_back({b_.byte(c), node_rule(kid)});
      }
      if (!others.empty()) alts.push_back({b_.byte_class(others), free_tail});
      return b_.rule("key", std::move(alts));
    };
    return b_.rule("other_key", {{b_.byte('"'), node_rule(0)}});
  }

  Elem ref(const Json& r, int depth) {
    TANDEM_REQUIRE(r.is_string(), kInvalidArgument, "JSON Schema '$ref' must be a string");
    const std::string target = r.template get<std::string>();
    TANDEM_REQUIRE(!target.empty() && target[0] == '#', kUnsupported,
                   "unsupported JSON Schema keyword '$ref' to '", target,
                   "' (only local '#...' references)");
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    TANDEM_REQUIRE(refs_.size() < kMaxRefs, kInvalidArgument, "JSON Schema has more than ",
                   kMaxRefs, " distinct $ref targets");
    const Json* node = &root_;
    try {
      if (target.size() > 1) node = &root_.at(typename Json::json_pointer(target.substr(1)));
    } catch (const std::exception&) {
      TANDEM_FAIL(kInvalidArgument, "JSON Schema '$ref' target '", target, "' not found");
    }
    const Elem rule = b_.declare("ref");
    refs_[target] = rule;
    b_.define(rule, {{compile(*node, depth + 1)}});
    return rule;
  }

  const Json& root_;
  GrammarBuilder b_;
  JsonParts parts_;
  std::map<std::string, Elem> refs_;
};

}  // namespace

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema) {
  return SchemaCompiler<nlohmann::json>(schema).run();
}

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema) {
  return SchemaCompiler<nlohmann::ordered_json>(schema).run();
}

std::shared_ptr<const Grammar> compile_json_schema_text(std::string_view schema_json) {
  check_json_depth(schema_json, kMaxRequestJsonDepth, "JSON Schema");
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(schema_json);
  } catch (const nlohmann::json::exception& e) {
    TANDEM_FAIL(kInvalidArgument, "JSON Schema is not valid JSON: ", e.what());
  }
  return compile_json_schema(j);
}

std::shared_ptr<const Grammar> json_object_grammar() {
  GrammarBuilder b;
  JsonParts parts(b);
  return b.finish(parts.object());
}

std::shared_ptr<const Grammar> json_value_grammar() {
  GrammarBuilder b;
  JsonParts parts(b);
  return b.finish(parts.value());
}

}  // namespace tandem::grammar
