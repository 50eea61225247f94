// Flag parsing for the tandem subcommands.
#include "server/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kernels/common.h"

namespace tandem {

Flags::Flags(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
             const std::set<std::string>& bool_flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) TANDEM_FAIL(kInvalidArgument, "unexpected argument \"", a, "\"");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (value_flags.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) TANDEM_FAIL(kInvalidArgument, "--", name, " needs a value");
        value = args[++i];
      }
      values_[name] = value;
    } else if (bool_flags.count(name)) {
      if (inline_value) TANDEM_FAIL(kInvalidArgument, "--", name, " takes no value");
      values_[name] = "1";
    } else {
      TANDEM_FAIL(kInvalidArgument, "unknown flag --", name);
    }
  }
}

std::string Flags::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::string Flags::required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) TANDEM_FAIL(kInvalidArgument, "--", name, " is required");
  return it->second;
}

int64_t Flags::integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0' || v < lo || v > hi)
    TANDEM_FAIL(kInvalidArgument, "--", name, " must be an integer in [", lo, ", ", hi, "], got \"",
                it->second, "\"");
  return v;
}

double Flags::number(const std::string& name, double def, double lo, double hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
    TANDEM_FAIL(kInvalidArgument, "--", name, " must be a number in [", lo, ", ", hi, "], got \"",
                it->second, "\"");
  return v;
}

}  // namespace tandem
