// The main of every test executable. FA_GPU_TESTS (set per executable by CMake) decides what a
// machine without a usable GPU means: the executable returns 77, which CTest reports as
// "Not Run (Skipped)", never as passed; with FA_REQUIRE_GPU=1 (GPU machines, tools/gpu-run.sh)
// it fails instead, so a broken driver cannot turn a GPU run green. Listing the test cases
// (doctest_discover_tests does it at build time) never touches the GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fa/cuda_check.hpp"
#include "fa/random.hpp"
#include "check.hpp"

#ifndef FA_GPU_TESTS
#error "FA_GPU_TESTS must be 0 or 1 (set by fa_add_doctest)"
#endif

// Resets the count of failures at each test case's start (tests/check.hpp shows the first few)
// and says at its end how many more failed.
struct FailureCounter : doctest::IReporter {
  explicit FailureCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { fa::test::failures_in_test_case() = 0; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    const int more = fa::test::failures_in_test_case() - fa::test::kFailuresShown;
    if (more > 0)
      std::printf("... and %d more failing case(s) in this test, not shown: the first failure above is the one to read\n", more);
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("fa_failure_counter", 1, FailureCounter);

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  if (ctx.shouldExit()) return ctx.run();  // --list-test-cases, --help, ...
#if FA_GPU_TESTS
  std::string why;
  if (fa::no_gpu(&why)) {
    const char* req = std::getenv("FA_REQUIRE_GPU");
    if (req != nullptr && std::string(req) == "1") {
      std::fprintf(stderr, "FAIL: FA_REQUIRE_GPU=1 but no usable CUDA GPU (%s)\n", why.c_str());
      return 1;
    }
    std::printf("SKIPPED: no usable CUDA GPU (%s). Set FA_REQUIRE_GPU=1 to make this a failure.\n", why.c_str());
    return 77;
  }
#endif
  std::printf("FA_TEST_SEED=%llu (set FA_TEST_SEED to change the inputs)\n",
              static_cast<unsigned long long>(fa::base_seed()));
  return ctx.run();
}
