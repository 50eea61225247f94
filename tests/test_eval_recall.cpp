// `tandem eval-recall` on the bundled tandem-demo with a recall set written here: the answers are
// the dense greedy continuations of each prompt, so the dense cache and the exact hybrid split
// (--sparse full) score every sample, wrong answers score none, and a sparse policy runs through
// the same sweep and reports the share of host entries it attended.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/engine_fixture.h"

using namespace tandem;
using namespace tandem::test;

namespace {

namespace fs = std::filesystem;

// Runs `tandem eval-recall` with args; returns its JSON (stdout).
nlohmann::json eval_recall(const std::string& args) {
  const fs::path out =
      fs::temp_directory_path() / ("tandem-eval-recall-" + std::to_string(getpid()));
  const std::string cmd = std::string(TANDEM_TANDEM_BIN) + " eval-recall --model " +
                          repo_path("models/tandem-demo").string() + " " + args + " >" +
                          out.string() + " 2>/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(out);
  nlohmann::json j = nlohmann::json::parse(in);
  fs::remove(out);
  return j;
}

}  // namespace

TEST_CASE("eval-recall: the exact policies score the dense answers, wrong ones score none",
          "[eval-recall]") {
  Setup s;
  const fs::path dir =
      fs::temp_directory_path() / ("tandem-recall-set-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string text;
  for (int i = 0; i < 30; ++i)
    text += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + "\n\n";
  const std::vector<int32_t> all = demo_tokenizer().encode(text);
  REQUIRE(all.size() > 400);
  std::ofstream good(dir / "good.jsonl"), bad(dir / "bad.jsonl");
  for (int64_t context : {150, 300})
    for (double depth : {0.0, 0.5}) {
      std::vector<int32_t> prompt(all.begin() + static_cast<int64_t>(depth * 100),
                                  all.begin() + static_cast<int64_t>(depth * 100) + context);
      const std::vector<int32_t> answer = reference(*s.model, prompt, 3);
      std::vector<int32_t> wrong = answer;
      wrong[0] = (wrong[0] + 1) % 4096;
      const nlohmann::json base = {{"context", context}, {"depth", depth}, {"prompt_ids", prompt}};
      nlohmann::json g = base, b = base;
      g["answer_ids"] = answer;
      b["answer_ids"] = wrong;
      good << g.dump() << "\n";
      bad << b.dump() << "\n";
    }
  good.close();
  bad.close();
  const std::string hybrid = " --window 64 --block 16 --sinks 4 --cpu-attn parallel";
  const nlohmann::json dense = eval_recall("--file " + (dir / "good.jsonl").string() + " --dense");
  CHECK(dense["accuracy"] == 1.0);
  CHECK(dense["samples"] == 4);
  REQUIRE(dense["cells"].size() == 4);
  CHECK(dense["by_context"].size() == 2);
  CHECK(dense["decode_last"] == 1);  // the prompt's last token went through a decode step
  const nlohmann::json prefilled =
      eval_recall("--file " + (dir / "good.jsonl").string() + " --dense --decode-last 0");
  CHECK(prefilled["accuracy"] == 1.0);
  CHECK(prefilled["decode_last"] == 0);
  const nlohmann::json full =
      eval_recall("--file " + (dir / "good.jsonl").string() + hybrid + " --sparse full");
  CHECK(full["accuracy"] == 1.0);
  CHECK(full["host_fraction_attended"] == 1.0);
  const nlohmann::json wrong =
      eval_recall("--file " + (dir / "bad.jsonl").string() + hybrid + " --sparse full");
  CHECK(wrong["accuracy"] == 0.0);
  const nlohmann::json topk = eval_recall("--file " + (dir / "good.jsonl").string() + hybrid +
                                          " --sparse topk --topk-blocks 2 --max-samples 2");
  CHECK(topk["samples"] == 2);
  CHECK(topk["host_fraction_attended"].get<double>() < 1.0);
  // A broken line is refused with its line number.
  std::ofstream(dir / "broken.jsonl") << "{\"context\": 1}\n";
  const std::string cmd = std::string(TANDEM_TANDEM_BIN) + " eval-recall --model " +
                          repo_path("models/tandem-demo").string() + " --file " +
                          (dir / "broken.jsonl").string() + " >/dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) != 0);
  fs::remove_all(dir);
}

TEST_CASE("eval-recall on tandem-recall: far needles need the host tier", "[eval-recall]") {
  // The bundled recall model answers every dense sample of this spread (every 32nd prompt of
  // the replay set: 512-4096 tokens, needles at every depth); the exact hybrid split answers the
  // same ones, a device window of 256 tokens without the host tier loses every needle outside it,
  // and topk finds some of those in the host tier.
  const std::string model = repo_path("models/tandem-recall").string();
  auto run = [&](const std::string& args) {
    const fs::path out =
        fs::temp_directory_path() / ("tandem-eval-recall-m-" + std::to_string(getpid()));
    const std::string cmd = std::string(TANDEM_TANDEM_BIN) + " eval-recall --model " + model +
                            " --max-samples 10 --threads 2 " + args + " >" + out.string() +
                            " 2>/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream in(out);
    nlohmann::json j = nlohmann::json::parse(in);
    fs::remove(out);
    return j;
  };
  const nlohmann::json dense = run("--dense");
  CHECK(dense["samples"] == 10);
  CHECK(dense["accuracy"] == 1.0);
  const std::string hybrid = "--window 256 --block 32 --cpu-attn parallel ";
  const nlohmann::json full = run(hybrid + "--sparse full");
  CHECK(full["accuracy"] == 1.0);
  const nlohmann::json window = run(hybrid + "--sparse topk --topk-blocks 0");
  CHECK(window["accuracy"].get<double>() <= 0.5);
  const nlohmann::json topk = run(hybrid + "--sparse topk --topk-blocks 8");
  CHECK(topk["accuracy"].get<double>() > window["accuracy"].get<double>());
}
