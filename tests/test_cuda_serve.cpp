// `tandem serve --device cuda` end to end: the same greedy chat completion and the same streamed
// completion as `--device cpu`, over HTTP, with the hybrid store's host tier in use (a small
// device window, so most of the prompt's KV is attended by the CPU and merged on the device).
// Runs wherever a CUDA device is visible: in CI on the SIMT emulator (ctest label "emulated"),
// skipped (exit 4) without one. Model: the bundled
// models/tandem-demo.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <httplib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_helpers.h"
#include "tests/gpu_skip.h"
#include "tests/server_process.h"

using json = nlohmann::json;
namespace fs = std::filesystem;
using tandem::test::ServerProcess;
using tandem::test::SkipWithoutGpu;

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

namespace {

fs::path model_dir() { return tandem::test::repo_path("models/tandem-demo"); }

json post(int port, const std::string& path, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  const auto r = c.Post(path, body.dump(), "application/json");
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  return json::parse(r->body);
}

// The text of a streamed completion (SSE "data:" events).
std::string streamed_text(int port, json body) {
  body["stream"] = true;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  const auto r = c.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  std::string text;
  size_t at = 0;
  while ((at = r->body.find("data: ", at)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", at);
    const std::string data = r->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const json e = json::parse(data);
    if (!e["choices"].empty()) text += e["choices"][0]["text"].get<std::string>();
  }
  return text;
}

}  // namespace

TEST_CASE("serve --device cuda answers as --device cpu does (greedy, hybrid KV)", "[cuda][serve]") {
  const std::vector<std::string> kv = {"--sinks", "4",        "--window", "16",         "--block",
                                       "16",      "--sparse", "full",     "--cpu-attn", "ahead"};
  std::vector<std::string> cpu_flags = {"--device", "cpu"}, gpu_flags = {"--device", "cuda"};
  cpu_flags.insert(cpu_flags.end(), kv.begin(), kv.end());
  gpu_flags.insert(gpu_flags.end(), kv.begin(), kv.end());
  ServerProcess cpu(model_dir(), cpu_flags);
  ServerProcess gpu(model_dir(), gpu_flags);
  REQUIRE(gpu.log().find("cuda") != std::string::npos);  // the load line names the backend

  const json chat = {
      {"messages",
       {{{"role", "user"},
         {"content",
          "Once upon a time there was a little girl named Lily who loved to play in the park "
          "with her dog. One day they found a big red ball under a tree and"}}}},
      {"max_tokens", 24},
      {"temperature", 0}};
  const json a = post(cpu.port(), "/v1/chat/completions", chat);
  const json b = post(gpu.port(), "/v1/chat/completions", chat);
  const std::string ta = a["choices"][0]["message"]["content"],
                    tb = b["choices"][0]["message"]["content"];
  INFO("cpu: " << ta << "\ncuda: " << tb);
  CHECK(!ta.empty());
  CHECK(ta == tb);
  CHECK(a["usage"] == b["usage"]);
  CHECK(a["usage"]["prompt_tokens"].get<int>() > 20);  // past the 16-token window: host tier used

  const json completion = {
      {"prompt", "The little dog ran to the park because"}, {"max_tokens", 16}, {"temperature", 0}};
  const std::string sa = streamed_text(cpu.port(), completion);
  const std::string sb = streamed_text(gpu.port(), completion);
  INFO("cpu: " << sa << "\ncuda: " << sb);
  CHECK(!sa.empty());
  CHECK(sa == sb);
}
