// A small JSON Schema validator for the tests of constrained decoding: written apart from the
// grammar compiler (engine/grammar/json_schema.*) so that generated documents are checked by a
// second, independent reading of the schema. Covers the keywords the tests' schemas use.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace tandem::test {

inline size_t utf8_chars(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

inline bool json_type_is(const nlohmann::json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

// Whether v is valid against schema s (root: the whole schema, for "#/..." references).
inline bool json_valid(const nlohmann::json& v, const nlohmann::json& s,
                       const nlohmann::json& root) {
  using json = nlohmann::json;
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"].get<std::string>();
    return json_valid(v, r == "#" ? root : root.at(json::json_pointer(r.substr(1))), root);
  }
  if (s.value("nullable", false) && v.is_null()) return true;
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool any = false;
    for (const json& e : s["enum"]) any = any || e == v;
    if (!any) return false;
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    int n = 0;
    for (const json& b : s[k]) n += json_valid(v, b, root);
    if (n == 0 || (std::string(k) == "oneOf" && n > 1)) return false;
  }
  if (s.contains("allOf"))
    for (const json& b : s["allOf"])
      if (!json_valid(v, b, root)) return false;
  if (s.contains("type")) {
    bool any = false;
    if (s["type"].is_string()) {
      any = json_type_is(v, s["type"].get<std::string>());
    } else {
      for (const json& t : s["type"]) any = any || json_type_is(v, t.get<std::string>());
    }
    if (!any) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    if (s.contains("minLength") && utf8_chars(str) < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && utf8_chars(str) > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>(),
                                                                    std::regex::ECMAScript)))
      return false;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const json& e : v)
        if (!json_valid(e, s["items"], root)) return false;
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    if (s.contains("required"))
      for (const json& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!json_valid(it.value(), props[it.key()], root)) return false;
      } else if (s.contains("additionalProperties") &&
                 !json_valid(it.value(), s["additionalProperties"], root)) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace tandem::test
