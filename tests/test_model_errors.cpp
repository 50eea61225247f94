// Bad model folders: each fault gives a tandem::Error whose one-line message names the file and
// the problem, and `tandem run` exits non-zero with that line instead of crashing.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "kernels/backend.h"
#include "models/model.h"
#include "tests/test_helpers.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

// A scratch copy of a fixture model that a test may damage.
struct ScratchModel {
  fs::path dir;
  explicit ScratchModel(const std::string& fixture) {
    static std::mt19937_64 rng(std::random_device{}());
    dir = fs::temp_directory_path() / ("tandem-bad-model-" + std::to_string(rng()));
    fs::create_directories(dir);
    for (const auto& e :
         fs::directory_iterator(tandem::test::repo_path("tests/fixtures/models/" + fixture)))
      fs::copy_file(e.path(), dir / e.path().filename());
  }
  ~ScratchModel() { fs::remove_all(dir); }
  std::string read(const std::string& f) const {
    std::ifstream in(dir / f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void write(const std::string& f, const std::string& s) const {
    std::ofstream(dir / f, std::ios::binary | std::ios::trunc) << s;
  }
  // Same-length edit of a file's bytes (keeps safetensors offsets valid).
  void replace(const std::string& f, const std::string& from, const std::string& to) const {
    std::string s = read(f);
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
    write(f, s);
  }
};

// Loads the model and returns the error message (empty when it loaded).
std::string load_error(const fs::path& dir) {
  auto backend = make_cpu_backend();
  try {
    Model::load(dir, *backend);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void check_one_line(const std::string& msg) { CHECK(msg.find('\n') == std::string::npos); }

// `tandem run` of the bundled demo model with `args`, its stdout and stderr into m's folder
// (stdout.txt, stderr.txt); returns the exit status.
int run_demo(const ScratchModel& m, const std::string& args) {
  const std::string cmd = std::string(TANDEM_TANDEM_BIN) + " run --device cpu --model " +
                          tandem::test::repo_path("models/tandem-demo").string() + " " + args +
                          " > " + (m.dir / "stdout.txt").string() + " 2> " +
                          (m.dir / "stderr.txt").string();
  const int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

// A command's exit for a bad --flag value: status 1 and one line on stderr naming the flag.
void check_bad_flag(int exit_code, const std::string& err, const char* flag) {
  CHECK(exit_code == 1);
  CHECK_THAT(err, Catch::StartsWith("tandem: error: ") && Catch::Contains(flag));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

}  // namespace

TEST_CASE("missing files are named", "[model][errors]") {
  ScratchModel m("llama-tiny");
  fs::remove(m.dir / "model.safetensors");
  std::string e = load_error(m.dir);
  CHECK_THAT(e, Catch::Contains("model.safetensors") && Catch::Contains("no *.safetensors"));
  fs::remove(m.dir / "config.json");
  e = load_error(m.dir);
  CHECK_THAT(e, Catch::Contains("config.json") && Catch::Contains("not found"));
  CHECK_THAT(load_error(m.dir / "nope"), Catch::Contains("model folder not found"));
  check_one_line(e);
}

TEST_CASE("a missing shard is named", "[model][errors]") {
  ScratchModel m("mistral-tiny-bf16-sharded");
  fs::remove(m.dir / "model-00002-of-00002.safetensors");
  CHECK_THAT(load_error(m.dir),
             Catch::Contains("model-00002-of-00002.safetensors") && Catch::Contains("not found"));
}

TEST_CASE("unknown model_type and malformed config", "[model][errors]") {
  ScratchModel m("llama-tiny");
  m.replace("config.json", "\"llama\"", "\"gpt_neox\"");
  std::string e = load_error(m.dir);
  CHECK_THAT(e,
             Catch::Contains("config.json") && Catch::Contains("unknown model_type \"gpt_neox\""));
  check_one_line(e);
  m.write("config.json", "{\"model_type\": \"llama\", ");
  CHECK_THAT(load_error(m.dir), Catch::Contains("config.json") && Catch::Contains("invalid JSON"));
  m.write("config.json",
          "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": \"big\"}");
  CHECK_THAT(load_error(m.dir), Catch::Contains("\"hidden_size\" must be an integer"));
}

TEST_CASE("unsupported dtype is named with its tensor", "[model][errors]") {
  ScratchModel m("llama-tiny");
  // Same length, so the header stays valid: F32 -> F64 for the first tensor listed.
  m.replace("model.safetensors", "\"F32\"", "\"F64\"");
  const std::string e = load_error(m.dir);
  CHECK_THAT(e, Catch::Contains("model.safetensors") && Catch::Contains("unsupported dtype F64"));
  check_one_line(e);
}

TEST_CASE("missing and mis-shaped tensors are named", "[model][errors]") {
  {
    ScratchModel m("llama-tiny");
    m.replace("model.safetensors", "layers.1.self_attn.v_proj", "layers.1.self_attn.x_proj");
    const std::string e = load_error(m.dir);
    CHECK_THAT(e, Catch::Contains("model.safetensors") &&
                      Catch::Contains("missing tensor \"model.layers.1.self_attn.v_proj.weight\""));
  }
  {
    ScratchModel m("llama-tiny");
    m.replace("config.json", "\"intermediate_size\": 160", "\"intermediate_size\": 161");
    const std::string e = load_error(m.dir);
    CHECK_THAT(e, Catch::Contains("model.safetensors") && Catch::Contains("has shape [160,64]") &&
                      Catch::Contains("expected [161,64]"));
  }
}

TEST_CASE("truncated weights are detected at load", "[model][errors]") {
  ScratchModel m("llama-tiny");
  const std::string full = m.read("model.safetensors");
  m.write("model.safetensors", full.substr(0, full.size() / 2));
  std::string e = load_error(m.dir);
  CHECK_THAT(e, Catch::Contains("model.safetensors") && Catch::Contains("truncated"));
  m.write("model.safetensors", full.substr(0, 5));
  e = load_error(m.dir);
  CHECK_THAT(e, Catch::Contains("truncated"));
  m.write("model.safetensors", full.substr(0, 200));  // inside the JSON header
  CHECK_THAT(load_error(m.dir), Catch::Contains("truncated"));
}

TEST_CASE("tandem run reports a bad model in one line and exits non-zero", "[model][errors][cli]") {
  ScratchModel m("llama-tiny");
  m.replace("config.json", "\"llama\"", "\"gpt_neox\"");
  const fs::path out = m.dir / "stderr.txt";
  const std::string cmd = std::string(TANDEM_TANDEM_BIN) + " run --model " + m.dir.string() +
                          " --prompt hi 2> " + out.string();
  const int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  const std::string err = m.read("stderr.txt");
  CHECK_THAT(err, Catch::StartsWith("tandem: error: ") && Catch::Contains("unknown model_type"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

TEST_CASE("tandem CMD --help prints the usage and exits 0", "[cli]") {
  ScratchModel m("llama-tiny");  // only for a scratch folder
  // `tandem --help` lists the commands; `tandem CMD --help` (or -h anywhere after it) the
  // command's options (tests/test_options.cpp checks that they are all there).
  const std::pair<const char*, const char*> cases[] = {
      {"--help", "usage: tandem <command>"},
      {"serve --help", "usage: tandem serve --model DIR"},
      {"run --model x -h", "usage: tandem run --model DIR --prompt TEXT"},
      {"perplexity --help", "usage: tandem perplexity --model DIR --file TEXT"}};
  for (const auto& [args, usage] : cases) {
    const fs::path out = m.dir / "stdout.txt";
    const std::string cmd =
        std::string(TANDEM_TANDEM_BIN) + " " + args + " > " + out.string() + " 2>/dev/null";
    const int status = std::system(cmd.c_str());
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_THAT(m.read("stdout.txt"), Catch::StartsWith(usage));
  }
}

TEST_CASE("--kv-dtype picks the stored KV type; a bad value is a one-line error", "[cli]") {
  ScratchModel m("llama-tiny");  // only for a scratch folder
  for (const char* dt : {"bf16", "f16", "q4"}) {
    CAPTURE(dt);
    const int code = run_demo(
        m, std::string("--prompt 'def add(self, key, value):\n    self.items[key] = value\n    "
                       "return self.items[key]\n\n' --max-tokens 8 --temperature 0 --window 16 "
                       "--block 16 --sparse full --kv-dtype ") +
               dt);
    if (std::string(dt) == "q4") {
      check_bad_flag(code, m.read("stderr.txt"), "--kv-dtype");
    } else {
      CHECK(code == 0);
      CHECK(!m.read("stdout.txt").empty());
    }
  }
}

TEST_CASE("--weight-memory map and huge decode the same tokens; a bad value is one line", "[cli]") {
  ScratchModel m("llama-tiny");  // only for a scratch folder
  std::map<std::string, std::string> out;
  for (const char* mem : {"map", "huge", "auto", "mapped"}) {
    CAPTURE(mem);
    const int code = run_demo(
        m,
        std::string("--prompt 'def add(a, b):' --max-tokens 12 --temperature 0 --weight-memory ") +
            mem);
    if (std::string(mem) == "mapped") {
      check_bad_flag(code, m.read("stderr.txt"), "--weight-memory");
    } else {
      CHECK(code == 0);
      out[mem] = m.read("stdout.txt");
      CHECK(!out[mem].empty());
    }
  }
  CHECK(out["huge"] == out["map"]);
  CHECK(out["auto"] == out["map"]);
}

TEST_CASE("bench-decode --fill import, --window-frac and --batch max", "[cli][bench]") {
  ScratchModel m("llama-tiny");  // a scratch folder for a random-weight model
  const std::string bin = TANDEM_TANDEM_BIN;
  const fs::path model = m.dir / "tiny";
  REQUIRE(std::system((bin + " make-model --shape tiny --dtype bf16 --out " + model.string() +
                       " > /dev/null 2>&1")
                          .c_str()) == 0);
  auto run = [&](const std::string& flags, std::vector<nlohmann::json>* lines) {
    const fs::path out = m.dir / "out.txt", err = m.dir / "err.txt";
    const std::string cmd = bin + " bench-decode --device cpu --model " + model.string() +
                            " --fill import --depth 300 --gen 3 --bw-bytes 1048576 " + flags +
                            " > " + out.string() + " 2> " + err.string();
    const int status = std::system(cmd.c_str());
    std::istringstream in(m.read("out.txt"));
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) lines->push_back(nlohmann::json::parse(l));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::vector<nlohmann::json> lines;
  REQUIRE(run("--batch 2,max --window-frac 0.25 --sparse full --cpu-attn parallel --kv-dtype bf16",
              &lines) == 0);
  REQUIRE(lines.size() == 2);
  for (const auto& j : lines) {
    CHECK(j["fill"] == "import");
    CHECK(j["window"] == 128);  // 25% of 303 tokens, rounded up to blocks of 64
    CHECK(j["kv_dtype"] == "bf16");
    CHECK(j["host_fraction_attended"].get<double>() == 1.0);  // full attends every host entry
    CHECK(j["host_kv_bytes_per_seq"].get<int64_t>() > 0);
    CHECK(j["host_wait_ms_per_step"].get<double>() >= 0.0);
    CHECK(j["decode_tokens_per_s"].get<double>() > 0.0);
  }
  CHECK(lines[0]["batch"] == 2);
  CHECK(lines[0]["batch_limit"] == "given");
  CHECK(lines[1]["batch_is_max"] == true);
  CHECK(lines[1]["batch"].get<int64_t>() >= 1);
  CHECK((lines[1]["batch_limit"] == "host" || lines[1]["batch_limit"] == "cap"));
  // Window 100%: every token on the device, nothing on the host.
  lines.clear();
  REQUIRE(run("--batch 1 --window-frac 1 --sparse full", &lines) == 0);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["host_kv_bytes_per_seq"] == 0);
  CHECK(lines[0]["host_fraction_attended"].get<double>() == 0.0);
  // Not one sequence fits: a one-line error, exit 1.
  lines.clear();
  CHECK(run("--batch max --window-frac 0.25 --reserve-gib 1000000", &lines) == 1);
  CHECK_THAT(m.read("err.txt"), Catch::Contains("not one sequence"));
  CHECK(run("--fill magic", &lines) == 1);
  CHECK_THAT(m.read("err.txt"), Catch::Contains("--fill"));
}
