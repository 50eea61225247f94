// Reading options by the table: values checked against their entry, the command line, the
// `--config` JSON file, and the parsed values' getters.
#include "server/options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find(sep, at);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// "a|b|c" -> "a, b or c".
std::string one_of(std::string_view choices) {
  const std::vector<std::string> c = split(choices, '|');
  std::string out;
  for (size_t i = 0; i < c.size(); ++i)
    out += (i == 0 ? "" : i + 1 == c.size() ? " or " : ", ") + c[i];
  return out;
}

bool is_choice(std::string_view choices, std::string_view v) {
  for (const std::string& c : split(choices, '|'))
    if (c == v) return true;
  return false;
}

bool parse_int(const std::string& s, int64_t& v) {
  char* end = nullptr;
  errno = 0;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end != s.c_str() && *end == '\0';
}

bool parse_float(const std::string& s, double& v) {
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0' && std::isfinite(v);
}

// The items of a list value; empty items (a trailing comma) are skipped.
std::vector<std::string> list_items(std::string_view s) {
  std::vector<std::string> out;
  for (std::string& item : split(s, ','))
    if (!item.empty()) out.push_back(std::move(item));
  return out;
}

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

namespace {

// What to add to "unknown option NAME": a close option of cmd, else the commands taking NAME.
std::string unknown_hint(Command cmd, std::string_view name, std::string_view quote_open,
                         std::string_view quote_close) {
  const OptionSpec* best = nullptr;
  size_t best_d = name.size() <= 3 ? 2 : 3;  // a suggestion must be closer than this
  for (const OptionSpec* o : options_of(cmd)) {
    const size_t d = edit_distance(name, o->name);
    if (d < best_d) best = o, best_d = d;
  }
  if (best != nullptr) return cat(" (did you mean ", quote_open, best->name, quote_close, "?)");
  std::string others;
  for (const CommandSpec& c : command_table())
    if (find_option(c.id, name) != nullptr) others += cat(others.empty() ? "" : ", ", c.name);
  if (!others.empty()) return cat(" (an option of ", others, ")");
  return "";
}

[[noreturn]] void fail_unknown(Command cmd, std::string_view name) {
  TANDEM_FAIL(kInvalidArgument, "unknown option --", name, " for tandem ", command_spec(cmd).name,
              unknown_hint(cmd, name, "--", ""), "; tandem ", command_spec(cmd).name,
              " --help lists the options");
}

// The command line alone (no config file, no required check).
Options parse_args(Command cmd, const std::vector<std::string>& args) {
  Options out(cmd);
  const auto is_option = [](const std::string& a) { return a.rfind("--", 0) == 0; };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!is_option(a) || a.size() == 2)
      TANDEM_FAIL(kInvalidArgument, "unexpected argument \"", a, "\" (options start with --)");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const OptionSpec* s = find_option(cmd, name);
    if (s == nullptr) fail_unknown(cmd, name);
    if (s->type == OptType::kBool) {
      TANDEM_REQUIRE(!inline_value, kInvalidArgument, "--", name, " takes no value");
      value = "true";
    } else if (!inline_value && s->multi_word) {
      // vllm's --goodput takes several words ("ttft:300 tpot:50"): joined into one value.
      while (i + 1 < args.size() && !is_option(args[i + 1]))
        value += (value.empty() ? "" : " ") + args[++i];
    } else if (!inline_value) {
      const bool alone = i + 1 == args.size() || is_option(args[i + 1]);
      if (!(alone && s->optional_value)) {
        TANDEM_REQUIRE(i + 1 < args.size(), kInvalidArgument, "--", name, " needs a value");
        value = args[++i];
      }
    }
    if (!(s->optional_value && value.empty())) check_value(*s, value);
    out.set(name, std::move(value));
  }
  return out;
}

// A config: the path as given, else NAME[.json] in $TANDEM_CONFIG_DIR (the Docker image sets
// it), else in configs/ of the source tree.
fs::path find_config(const std::string& name) {
  if (fs::exists(name)) return name;
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("TANDEM_CONFIG_DIR"); env != nullptr && *env != 0)
    dirs.emplace_back(env);
  dirs.push_back(fs::path(TANDEM_SOURCE_DIR) / "configs");
  std::string tried;
  for (const fs::path& dir : dirs) {
    fs::path p = dir / name;
    if (!p.has_extension()) p += ".json";
    if (fs::exists(p)) return p;
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  TANDEM_FAIL(kNotFound, "--config: no file \"", name, "\" (nor ", tried, ")");
}

// A JSON value of a config as the text the command line would carry; nullopt if it has none.
std::optional<std::string> json_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return v.dump();
  if (!v.is_array()) return std::nullopt;
  std::string s;
  for (const nlohmann::json& item : v) {
    const std::optional<std::string> t =
        item.is_array() ? std::nullopt : json_text(item);  // no nesting
    if (!t) return std::nullopt;
    s += (s.empty() ? "" : ",") + *t;
  }
  return s;
}

}  // namespace

void check_value(const OptionSpec& s, const std::string& v) {
  const std::string_view n = s.name;
  switch (s.type) {
    case OptType::kBool:
      TANDEM_REQUIRE(v == "true", kInvalidArgument, "--", n, " takes no value");
      return;
    case OptType::kString:
      return;
    case OptType::kInt: {
      int64_t x = 0;
      TANDEM_REQUIRE(parse_int(v, x) && x >= s.int_lo && x <= s.int_hi, kInvalidArgument, "--", n,
                     " must be an integer in [", s.int_lo, ", ", s.int_hi, "], got \"", v, "\"");
      return;
    }
    case OptType::kFloat: {
      double x = 0;
      TANDEM_REQUIRE(parse_float(v, x) && x >= s.lo && x <= s.hi, kInvalidArgument, "--", n,
                     " must be a number in [", s.lo, ", ", s.hi, "], got \"", v, "\"");
      return;
    }
    case OptType::kEnum:
      TANDEM_REQUIRE(is_choice(s.choices, v), kInvalidArgument, "--", n, " must be ",
                     one_of(s.choices), ", got \"", v, "\"");
      return;
    case OptType::kIntList:
    case OptType::kFloatList:
    case OptType::kEnumList: {
      const std::vector<std::string> items = list_items(v);
      TANDEM_REQUIRE(!items.empty(), kInvalidArgument, "--", n, " needs at least one item");
      for (const std::string& item : items) {
        int64_t i = 0;
        double x = 0;
        if (s.type == OptType::kIntList)
          TANDEM_REQUIRE((parse_int(item, i) && i >= s.int_lo && i <= s.int_hi) ||
                             (!s.choices.empty() && is_choice(s.choices, item)),
                         kInvalidArgument, "--", n, ": \"", item, "\" is not an integer in [",
                         s.int_lo, ", ", s.int_hi, "]",
                         s.choices.empty() ? "" : cat(" or ", one_of(s.choices)));
        else if (s.type == OptType::kFloatList)
          TANDEM_REQUIRE(parse_float(item, x) && x >= s.lo && x <= s.hi, kInvalidArgument, "--", n,
                         ": \"", item, "\" is not a number in [", s.lo, ", ", s.hi, "]");
        else
          TANDEM_REQUIRE(is_choice(s.choices, item), kInvalidArgument, "--", n, ": \"", item,
                         "\" is not ", one_of(s.choices));
      }
      return;
    }
  }
}

const OptionSpec& Options::spec(std::string_view name) const {
  const OptionSpec* s = find_option(cmd_, name);
  TANDEM_CHECK(s != nullptr, "tandem ", command_spec(cmd_).name, " has no option --", name);
  return *s;
}

bool Options::has(std::string_view name) const {
  spec(name);
  return values_.find(name) != values_.end();
}

std::string Options::str(std::string_view name) const {
  const OptionSpec& s = spec(name);
  auto it = values_.find(name);
  return it != values_.end() ? it->second : std::string(s.def);
}

int64_t Options::integer(std::string_view name) const {
  const std::string v = str(name);
  TANDEM_CHECK(!v.empty(), "--", name, " has no default: give integer() one");
  int64_t x = 0;
  TANDEM_CHECK(parse_int(v, x), "--", name, " = \"", v, "\" is not an integer");
  return x;
}

int64_t Options::integer(std::string_view name, int64_t fallback) const {
  return has(name) || !spec(name).def.empty() ? integer(name) : fallback;
}

int64_t Options::integer_in(std::string_view name, int64_t fallback, int64_t lo, int64_t hi) const {
  const int64_t v = integer(name, fallback);
  TANDEM_REQUIRE(v >= lo && v <= hi, kInvalidArgument, "--", name, " must be in [", lo, ", ", hi,
                 "] here, got ", v);
  return v;
}

double Options::number(std::string_view name) const {
  const std::string v = str(name);
  double x = 0;
  TANDEM_CHECK(parse_float(v, x), "--", name, " = \"", v, "\" is not a number");
  return x;
}

double Options::number(std::string_view name, double fallback) const {
  return has(name) || !spec(name).def.empty() ? number(name) : fallback;
}

std::vector<std::string> Options::list(std::string_view name) const {
  return list_items(str(name));
}

std::vector<int64_t> Options::int_list(std::string_view name) const {
  std::vector<int64_t> out;
  for (const std::string& item : list(name)) {
    int64_t x = 0;
    TANDEM_CHECK(parse_int(item, x), "--", name, ": \"", item, "\" is not an integer");
    out.push_back(x);
  }
  return out;
}

std::vector<double> Options::number_list(std::string_view name) const {
  std::vector<double> out;
  for (const std::string& item : list(name)) {
    double x = 0;
    TANDEM_CHECK(parse_float(item, x), "--", name, ": \"", item, "\" is not a number");
    out.push_back(x);
  }
  return out;
}

void Options::set(std::string_view name, std::string value) {
  spec(name);
  values_.insert_or_assign(std::string(name), std::move(value));
}

void Options::overlay(const Options& other) {
  for (const auto& [name, value] : other.values_) set(name, value);
}

Options parse_config(Command cmd, const nlohmann::json& j, const std::string& where) {
  TANDEM_REQUIRE(j.is_object(), kInvalidArgument, where, ": must be a JSON object");
  Options out(cmd);
  for (const auto& [key, v] : j.items()) {
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    if (name == "config" || name.rfind("//", 0) == 0 || name.rfind("#", 0) == 0) continue;
    const OptionSpec* s = find_option(cmd, name);
    if (s == nullptr)
      TANDEM_FAIL(kInvalidArgument, where, ": unknown setting \"", key, "\" for tandem ",
                  command_spec(cmd).name, unknown_hint(cmd, name, "\"", "\""));
    if (s->type == OptType::kBool) {
      TANDEM_REQUIRE(v.is_boolean(), kInvalidArgument, where, ": \"", key,
                     "\" must be true or false");
      if (v.get<bool>()) out.set(name, "true");
      continue;
    }
    const std::optional<std::string> text = json_text(v);
    TANDEM_REQUIRE(text.has_value(), kInvalidArgument, where, ": \"", key,
                   "\" must be a string or a number",
                   s->type >= OptType::kIntList ? " or a list" : "");
    try {
      if (!(s->optional_value && text->empty())) check_value(*s, *text);
    } catch (const Error& e) {
      throw Error(e.kind(), cat(where, ": ", e.what()));
    }
    out.set(name, *text);
  }
  return out;
}

Options parse_command_line(Command cmd, const std::vector<std::string>& args) {
  const Options cli = parse_args(cmd, args);
  Options out(cmd);
  if (find_option(cmd, "config") != nullptr && cli.has("config")) {
    const fs::path path = find_config(cli.str("config"));
    std::ifstream in(path);
    TANDEM_REQUIRE(in, kIo, "--config: cannot read ", path.string());
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      TANDEM_FAIL(kInvalidArgument, path.string(), ": not valid JSON: ", e.what());
    }
    out = parse_config(cmd, j, path.string());
  }
  out.overlay(cli);  // the command line wins
  for (const OptionSpec* s : options_of(cmd))
    TANDEM_REQUIRE(!s->required || out.has(s->name), kInvalidArgument, "--", s->name,
                   " is required (tandem ", command_spec(cmd).name, " --help lists the options)");
  return out;
}

}  // namespace tandem
