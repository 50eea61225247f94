// The help texts the option table gives: `tandem --help`, `tandem CMD --help` and the markdown
// of docs/options.md (tests/test_options.cpp checks that the file matches).
#include <cctype>
#include <cstdint>
#include <sstream>

#include "server/options.h"

namespace tandem {
namespace {

constexpr size_t kWidth = 100;   // columns of the terminal help
constexpr size_t kHelpCol = 30;  // where the description of an option starts

std::string_view group_title(OptGroup g) {
  switch (g) {
    case OptGroup::kCommand:
      return "Options";
    case OptGroup::kModel:
      return "Model and device";
    case OptGroup::kKv:
      return "KV cache";
  }
  return "";
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// The option's values: type and range, or the allowed words.
std::string values_of(const OptionSpec& o, bool markdown) {
  const std::string words = markdown ? "`" + replace_all(std::string(o.choices), "|", "`, `") + "`"
                                     : replace_all(std::string(o.choices), "|", ", ");
  const std::string irange =
      o.int_hi == INT64_MAX ? cat(">= ", o.int_lo) : cat("in [", o.int_lo, ", ", o.int_hi, "]");
  const std::string frange = cat("[", fmt(o.lo), ", ", fmt(o.hi), "]");
  switch (o.type) {
    case OptType::kBool:
      return "switch";
    case OptType::kInt:
      return "integer " + irange;
    case OptType::kFloat:
      return "number in " + frange;
    case OptType::kString:
      return "text";
    case OptType::kEnum:
      return "one of " + words;
    case OptType::kIntList:
      return "list of integers " + irange + (o.choices.empty() ? "" : " or " + words);
    case OptType::kFloatList:
      return "list of numbers in " + frange;
    case OptType::kEnumList:
      return "list of " + words;
  }
  return "";
}

std::string default_of(const OptionSpec& o) {
  if (o.required) return "required";
  if (!o.def.empty()) return std::string(o.def);
  if (!o.def_doc.empty()) return std::string(o.def_doc);
  return o.type == OptType::kBool ? "off" : "none";
}

// Appends `text` to `out` wrapped at kWidth, continuation lines indented by `indent`; the first
// line continues from column `col`.
void wrap(std::string& out, const std::string& text, size_t col, size_t indent) {
  std::istringstream words(text);
  std::string w;
  bool first = true;
  while (words >> w) {
    if (!first && col + 1 + w.size() > kWidth) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
    } else if (!first) {
      out += ' ';
      ++col;
    }
    out += w;
    col += w.size();
    first = false;
  }
  out += '\n';
}

std::string option_line(const OptionSpec& o) {
  std::string head = cat("  --", o.name);
  if (o.type != OptType::kBool && o.type != OptType::kEnum) head += cat(" ", o.meta);
  if (o.type == OptType::kEnum) head += cat(" ", o.choices);
  std::string out = head;
  size_t col = head.size();
  if (col + 2 > kHelpCol) {
    out += "\n" + std::string(kHelpCol, ' ');
  } else {
    out += std::string(kHelpCol - col, ' ');
  }
  std::string text = std::string(o.help);
  if (o.type != OptType::kBool && o.type != OptType::kString && o.type != OptType::kEnum)
    text += "; " + values_of(o, false);
  if (o.required) {
    text += " (required)";
  } else if (o.type != OptType::kBool && (!o.def.empty() || !o.def_doc.empty())) {
    text += " (default: " + default_of(o) + ")";
  }
  wrap(out, text, kHelpCol, kHelpCol);
  return out;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string md_cell(std::string s) { return replace_all(std::move(s), "|", "\\|"); }

void md_table(std::string& out, const std::vector<const OptionSpec*>& opts) {
  out += "| option | values | default | description |\n|---|---|---|---|\n";
  for (const OptionSpec* o : opts) {
    std::string name = cat("`--", o->name);
    if (o->type != OptType::kBool) name += cat(" ", o->type == OptType::kEnum ? "X" : o->meta);
    name += "`";
    out += cat("| ", md_cell(name), " | ", md_cell(values_of(*o, true)), " | ",
               md_cell(default_of(*o)), " | ", md_cell(std::string(o->help)), " |\n");
  }
}

std::string commands_taking(CommandSet set) {
  std::string out;
  for (const CommandSpec& c : command_table())
    if ((set & command_bit(c.id)) != 0) out += cat(out.empty() ? "" : ", ", "`", c.name, "`");
  return out;
}

}  // namespace

std::string global_help() {
  std::string out =
      "usage: tandem <command> [options]\n"
      "       tandem <command> --help     the command's options\n"
      "       tandem help --markdown      every option as markdown (docs/options.md)\n"
      "       tandem help --params-markdown  the API's request parameters (README.md)\n"
      "\ncommands:\n";
  for (const CommandSpec& c : command_table()) {
    std::string head = cat("  ", c.name);
    head += std::string(head.size() < 18 ? 18 - head.size() : 1, ' ');
    out += head;
    // The first sentence of the summary.
    const std::string s(c.summary);
    const size_t stop = s.find(". ");
    wrap(out, stop == std::string::npos ? s : s.substr(0, stop + 1), head.size(), 18);
  }
  out += "\n";
  wrap(out,
       "Options are `--name value`, `--name=value` or a bare `--switch`; the last one wins. "
       "`serve` also reads a JSON file of settings (--config FILE); the command line wins over it.",
       0, 0);
  return out;
}

std::string command_help(Command cmd) {
  const CommandSpec& c = command_spec(cmd);
  std::string out = cat("usage: tandem ", c.name, " ", c.synopsis, "\n");
  wrap(out, std::string(c.summary), 0, 0);
  const std::vector<const OptionSpec*> opts = options_of(cmd);
  for (OptGroup g : {OptGroup::kCommand, OptGroup::kModel, OptGroup::kKv}) {
    bool any = false;
    for (const OptionSpec* o : opts) {
      if (o->group != g) continue;
      if (!any)
        out += cat(
            "\n", group_title(g),
            g == OptGroup::kKv ? " (the hybrid store: sinks + device window + host blocks)" : "",
            ":\n");
      any = true;
      out += option_line(*o);
    }
  }
  return out;
}

std::string options_markdown() {
  std::string out =
      "# Options of the tandem binary\n\n"
      "Generated from the option table (`server/option_table.cpp`) by `tandem help --markdown`; "
      "`tests/test_options.cpp` checks that this file matches it.\n\n"
      "Options are `--name value`, `--name=value` or a bare `--switch`; the last occurrence "
      "wins. `tandem serve --config FILE` reads a JSON object of settings first (keys are option "
      "names, `_` may stand for `-`; switches take `true`/`false`, lists a string or an array; "
      "keys starting with `//` or `#` are comments). Precedence, lowest first: the default "
      "below, the config file, the command line. A bad value, an unknown option or key is a "
      "one-line error naming it, exit code 1.\n\n"
      "| command | what it does |\n|---|---|\n";
  for (const CommandSpec& c : command_table())
    out += cat("| `tandem ", c.name, "` | ", md_cell(std::string(c.summary)), " |\n");
  for (const CommandSpec& c : command_table()) {
    out += cat("\n## tandem ", c.name, "\n\n`tandem ", c.name, " ", c.synopsis, "`\n\n");
    std::vector<const OptionSpec*> own;
    for (const OptionSpec* o : options_of(c.id))
      if (o->group == OptGroup::kCommand) own.push_back(o);
    std::string shared;
    for (OptGroup g : {OptGroup::kModel, OptGroup::kKv})
      for (const OptionSpec* o : options_of(c.id))
        if (o->group == g) {
          shared += cat(shared.empty() ? "" : " and ", "[", group_title(g), "](#",
                        replace_all(lower(std::string(group_title(g))), " ", "-"), ")");
          break;
        }
    if (!shared.empty()) out += cat("Also the options of ", shared, " below.\n\n");
    md_table(out, own);
  }
  for (OptGroup g : {OptGroup::kModel, OptGroup::kKv}) {
    std::vector<const OptionSpec*> opts;
    CommandSet set = 0;
    for (const OptionSpec& o : option_table())
      if (o.group == g) {
        opts.push_back(&o);
        set |= o.commands;
      }
    out += cat("\n## ", group_title(g), "\n\nTaken by ", commands_taking(set), ".\n\n");
    md_table(out, opts);
  }
  return out;
}

}  // namespace tandem
