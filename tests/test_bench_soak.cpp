// `tandem bench --soak-seconds` (the driver of scripts/soak.sh) against a demo-model server for
// a few seconds: every request kind is sent, malformed ones are refused with 400, aborted ones
// do not count as errors, nothing fails, and the summary has the fields soak_report.py reads.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/server_process.h"
#include "tests/test_helpers.h"

TEST_CASE("bench --soak-seconds drives a server with every request kind", "[bench][soak]") {
  using json = nlohmann::json;
  namespace fs = std::filesystem;
  const auto model = tandem::test::repo_path("models/tandem-demo");
  tandem::test::ServerProcess server(model, {"--max-batch", "8"});
  const auto out =
      fs::temp_directory_path() / ("tandem-soak-" + std::to_string(getpid()) + ".json");
  const std::string cmd =
      std::string(TANDEM_TANDEM_BIN) +
      " bench --quiet --base-url http://127.0.0.1:" + std::to_string(server.port()) + " --model " +
      model.string() +
      " --soak-seconds 3 --sample-interval 1 --max-concurrency 4"
      " --abort-ratio 0.3 --malformed-ratio 0.3 --random-input-len 16"
      " --random-output-len 8 --num-prompts 20 --save-result " +
      out.string() + " > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(out);
  const json s = json::parse(in);
  fs::remove(out);
  INFO(s.dump(1));
  CHECK(s["requests"].get<int64_t>() > 20);
  for (const char* kind : {"streamed", "whole", "aborted", "malformed"})
    CHECK(s["kinds"].value(kind, 0) > 0);
  CHECK(s["status"].value("400", 0) >= s["kinds"]["malformed"].get<int64_t>());
  CHECK(s["server_errors"] == 0);
  CHECK(s["transport_errors"] == 0);
  CHECK(s["incomplete"] == 0);
  CHECK(s["malformed_accepted"] == 0);
  CHECK(s["rejected"] == 0);
  CHECK(s["samples"].size() >= 3);  // [seconds, rss (-1: no --soak-pid), requests]
}
