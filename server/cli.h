// Command-line flags: `--name value`, `--name=value` and boolean `--name`. Every subcommand
// declares the flags it knows; an unknown flag or a malformed value is a one-line error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tandem {

class Flags {
 public:
  // value_flags take a value, bool_flags do not. Throws tandem::Error on an unknown flag.
  Flags(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
        const std::set<std::string>& bool_flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& def = "") const;
  std::string required(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  double number(const std::string& name, double def, double lo, double hi) const;
  bool flag(const std::string& name) const { return has(name); }

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace tandem
