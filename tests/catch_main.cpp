// The main of every Catch2 test program. Catch2 v2 exits with the number of failed assertions;
// ctest reads exit code 4 as "skipped" (SKIP_RETURN_CODE, used by the GPU tests without a device),
// so a run with exactly four failed assertions would be reported as skipped. Any failure exits 1;
// only an explicit skip exits 4: tests/gpu_skip.h, and the [shared] tests below.
//
// Tests tagged [shared] compare against the reference checkpoints in ../shared/models, which sits
// beside a CI checkout but not beside a user's clone. ctest runs them as their own entry,
// <program>_shared (CMakeLists.txt); when the folder is missing that run prints the folder and
// the name of every test it skips and exits 4, so a clone alone passes and the skip is visible.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

std::filesystem::path shared_models() {
  const char* env = std::getenv("TANDEM_SOURCE_DIR");  // as tests/test_helpers.h repo_path()
  const std::filesystem::path root = env != nullptr && *env != '\0' ? env : TANDEM_SOURCE_DIR;
  return root / ".." / "shared" / "models";
}

bool tagged_shared(const Catch::TestCase& t) {
  for (const std::string& tag : t.getTestCaseInfo().tags)
    if (tag == "shared") return true;
  return false;
}

struct SkipWithoutShared : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    TestEventListenerBase::testRunStarting(info);
    const auto tests = Catch::filterTests(Catch::getAllTestCasesSorted(*m_config),
                                          m_config->testSpec(), *m_config);
    if (tests.empty() || std::filesystem::is_directory(shared_models())) return;
    for (const Catch::TestCase& t : tests)
      if (!tagged_shared(t)) return;  // a mixed selection runs (and fails loudly where it must)
    std::fprintf(
        stderr, "%s: %zu tests skipped: they need the reference checkpoints in %s, absent:",
        program_invocation_short_name, tests.size(), shared_models().lexically_normal().c_str());
    for (const Catch::TestCase& t : tests) std::fprintf(stderr, " \"%s\";", t.name.c_str());
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
    std::exit(4);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutShared)

int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv) == 0 ? 0 : 1; }
