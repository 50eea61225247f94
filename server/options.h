// The options of the tandem binary. One declarative table (server/option_table.cpp) says, once per
// option: name, type, range or allowed values, default, help, and the subcommands that take it.
// The command-line parser, the `--config` JSON reader, `--help` and docs/options.md all read it.
//
// Precedence, lowest first: the table's default, the `--config` file (commands that take one),
// the command line; on the command line the last occurrence of an option wins.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/common.h"

namespace tandem {

enum class Command : uint8_t {
  kServe,
  kRun,
  kPerplexity,
  kBenchDecode,
  kMakeModel,
  kBenchSampler,
  kBench,
  kBenchCpuAttn,
  kBenchKernels,
  kBenchGrammar,
  kEvalRecall,
};

// A set of commands, one bit per Command.
using CommandSet = uint32_t;
constexpr CommandSet command_bit(Command c) { return CommandSet{1} << static_cast<unsigned>(c); }

struct CommandSpec {
  Command id;
  std::string_view name;      // as typed: "bench-decode"
  std::string_view synopsis;  // what follows `tandem NAME` in the usage line
  std::string_view summary;   // what the command does, for --help
};

enum class OptType : uint8_t {
  kBool,       // `--name` alone; no value
  kInt,        // in [int_lo, int_hi]
  kFloat,      // finite, in [lo, hi]
  kString,     // any text
  kEnum,       // one of `choices`
  kIntList,    // comma-separated integers in [int_lo, int_hi], or words of `choices`
  kFloatList,  // comma-separated numbers in [lo, hi]
  kEnumList,   // comma-separated words of `choices`
};

// The headings of --help: options of one command, or shared by the commands that load a model.
enum class OptGroup : uint8_t { kCommand, kModel, kKv };

struct OptionSpec {
  std::string_view name;  // without the leading "--"
  OptType type = OptType::kString;
  CommandSet commands = 0;
  OptGroup group = OptGroup::kCommand;
  std::string_view meta;     // the value's placeholder in help: N, DIR, ...
  std::string_view def;      // the default as written on the command line; "" when none
  std::string_view def_doc;  // when `def` is empty: the default chosen at run time, for help
  std::string_view help;
  int64_t int_lo = 0, int_hi = 0;  // kInt, kIntList
  double lo = 0, hi = 0;           // kFloat, kFloatList
  std::string_view choices;        // "a|b|c": kEnum, kEnumList; kIntList: words besides numbers
  bool required = false;
  bool optional_value = false;  // alone (before another option or at the end) it means ""
  bool multi_word = false;      // the value is every argument up to the next option, space-joined

  constexpr OptionSpec computed(std::string_view doc) const {
    OptionSpec o = *this;
    o.def_doc = doc;
    return o;
  }
  constexpr OptionSpec needed() const {
    OptionSpec o = *this;
    o.required = true;
    return o;
  }
  constexpr OptionSpec words(std::string_view w) const {
    OptionSpec o = *this;
    o.choices = w;
    return o;
  }
  constexpr OptionSpec value_optional() const {
    OptionSpec o = *this;
    o.optional_value = true;
    return o;
  }
  constexpr OptionSpec several_words() const {
    OptionSpec o = *this;
    o.multi_word = true;
    return o;
  }
};

// The tables (server/option_table.cpp).
std::span<const CommandSpec> command_table();
std::span<const OptionSpec> option_table();
const CommandSpec* find_command(std::string_view name);
const CommandSpec& command_spec(Command c);
// The entry `cmd` takes under this name, or null.
const OptionSpec* find_option(Command cmd, std::string_view name);
// Every entry `cmd` takes, in table order.
std::vector<const OptionSpec*> options_of(Command cmd);

// Checks `value` against the entry's type and range; throws kInvalidArgument naming --name.
void check_value(const OptionSpec& spec, const std::string& value);

// The parsed options of one command. Values are checked when parsed; the getters only convert.
// Asking for an option the command does not take is a programming error (kInternal).
class Options {
 public:
  explicit Options(Command cmd) : cmd_(cmd) {}

  Command command() const { return cmd_; }
  // Given on the command line or in the config file (not a default).
  bool has(std::string_view name) const;
  // The value, else the table's default ("" when it has none).
  std::string str(std::string_view name) const;
  bool flag(std::string_view name) const { return has(name); }
  // The value, else the table's default (kInternal when it has none), else `fallback` for
  // defaults computed at run time; integer_in also checks [lo, hi] known only at run time.
  int64_t integer(std::string_view name) const;
  int64_t integer(std::string_view name, int64_t fallback) const;
  int64_t integer_in(std::string_view name, int64_t fallback, int64_t lo, int64_t hi) const;
  double number(std::string_view name) const;
  double number(std::string_view name, double fallback) const;
  std::vector<std::string> list(std::string_view name) const;
  std::vector<int64_t> int_list(std::string_view name) const;
  std::vector<double> number_list(std::string_view name) const;
  // The enum value of a kEnum option's word.
  template <typename E>
  E pick(std::string_view name, std::initializer_list<std::pair<std::string_view, E>> map) const {
    const std::string v = str(name);
    for (const auto& [word, e] : map)
      if (word == v) return e;
    TANDEM_FAIL(kInternal, "--", name, ": \"", v, "\" has no meaning in this build");
  }

  // Sets a checked value (parse_command_line and parse_config use it).
  void set(std::string_view name, std::string value);
  // Copies every value of `other` over this one's.
  void overlay(const Options& other);

 private:
  const OptionSpec& spec(std::string_view name) const;

  Command cmd_;
  std::map<std::string, std::string, std::less<>> values_;
};

// The options of `cmd` from its arguments (after the command name), with the `--config` file
// they name read first when the command takes one; checks the required options. Throws
// kInvalidArgument (kNotFound, kIo for the file) with one line naming the option.
Options parse_command_line(Command cmd, const std::vector<std::string>& args);
// A config object: keys are option names ('_' may stand for '-'), values strings, numbers,
// booleans (kBool) or arrays (lists); keys starting with "//" or "#" are comments. `where` names
// the file in errors. Required options are not checked here.
Options parse_config(Command cmd, const nlohmann::json& j, const std::string& where);

// Edit distance with adjacent transpositions (optimal string alignment), for "did you mean".
size_t edit_distance(std::string_view a, std::string_view b);

// `tandem --help`, `tandem CMD --help`, and docs/options.md.
std::string global_help();
std::string command_help(Command cmd);
std::string options_markdown();

}  // namespace tandem
