// The tandem binary: parses the subcommand's options by the option table (server/options.h) and
// runs it (server/tools/). Every error reaches here as a tandem::Error (or a std::exception) and
// becomes one line on stderr and a non-zero exit code.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "server/openai_params.h"
#include "server/options.h"
#include "server/tools/commands.h"

namespace tandem {
namespace {

int dispatch(Command c, const Options& o) {
  switch (c) {
    case Command::kServe:
      return cmd_serve(o);
    case Command::kRun:
      return cmd_run(o);
    case Command::kPerplexity:
      return cmd_perplexity(o);
    case Command::kBenchDecode:
      return cmd_bench_decode(o);
    case Command::kMakeModel:
      return cmd_make_model(o);
    case Command::kBenchSampler:
      return cmd_bench_sampler(o);
    case Command::kBench:
      return cmd_bench(o);
    case Command::kBenchCpuAttn:
      return cmd_bench_cpu_attn(o);
    case Command::kBenchKernels:
      return cmd_bench_kernels(o);
    case Command::kBenchGrammar:
      return cmd_bench_grammar(o);
    case Command::kEvalRecall:
      return cmd_eval_recall(o);
  }
  TANDEM_FAIL(kInternal, "no code for command ", static_cast<int>(c));
}

// " (did you mean bench?)" for a command name one or two edits away from a known one.
std::string command_hint(const std::string& name) {
  for (const CommandSpec& c : command_table())
    if (edit_distance(name, c.name) <= 2) return cat(" (did you mean ", c.name, "?)");
  return "";
}

bool is_help(const std::string& a) { return a == "--help" || a == "-h"; }

// `tandem help [COMMAND | --markdown | --params-markdown]`.
int help(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fputs(global_help().c_str(), stdout);
  } else if (args[0] == "--markdown") {
    std::fputs(options_markdown().c_str(), stdout);
  } else if (args[0] == "--params-markdown") {
    std::fputs(openai::params_markdown().c_str(), stdout);
  } else if (const CommandSpec* c = find_command(args[0])) {
    std::fputs(command_help(c->id).c_str(), stdout);
  } else {
    std::fprintf(stderr, "tandem: unknown command \"%s\"%s\n", args[0].c_str(),
                 command_hint(args[0]).c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  using namespace tandem;
  spdlog::set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  if (argc < 2) {
    std::fputs(global_help().c_str(), stderr);
    return 2;
  }
  const std::string name = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (name == "help" || is_help(name)) return help(args);
  const CommandSpec* cmd = find_command(name);
  if (cmd == nullptr) {
    std::fprintf(stderr, "tandem: unknown command \"%s\"%s\n\n%s", name.c_str(),
                 command_hint(name).c_str(), global_help().c_str());
    return 2;
  }
  // `tandem CMD --help` (or -h anywhere after the command): the command's options.
  if (std::any_of(args.begin(), args.end(), is_help)) {
    std::fputs(command_help(cmd->id).c_str(), stdout);
    return 0;
  }
  try {
    return dispatch(cmd->id, parse_command_line(cmd->id, args));
  } catch (const Error& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: internal error: %s\n", e.what());
    return 1;
  }
}
