// The main of every test executable. FA_GPU_TESTS (set per executable by CMake) decides what a
// machine without a usable GPU means: the executable returns 77, which CTest reports as
// "Not Run (Skipped)", never as passed; with FA_REQUIRE_GPU=1 (GPU machines, tools/gpu-run.sh)
// it fails instead, so a broken driver cannot turn a GPU run green. Listing the test cases
// (doctest_discover_tests does it at build time) never touches the GPU. Under the grader
// (FA_GRADE_KEY set), main's last output is the signed result line of tests/grading_mac.hpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "fa/cuda_check.hpp"
#include "fa/random.hpp"
#include "check.hpp"
#include "grading_mac.hpp"

#ifndef FA_GPU_TESTS
#error "FA_GPU_TESTS must be 0 or 1 (set by fa_add_doctest)"
#endif

// What the run did, for the grader's result line: the test cases it ran and doctest's counts.
struct RunRecord {
  std::string first_case;
  int cases = 0;
  doctest::TestRunStats stats{};
  bool ended = false;
};
RunRecord& run_record() {
  static RunRecord r;
  return r;
}

// Resets the count of failures at each test case's start (tests/check.hpp shows the first few)
// and says at its end how many more failed.
struct FailureCounter : doctest::IReporter {
  explicit FailureCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    run_record().stats = s;
    run_record().ended = true;
  }
  void test_case_start(const doctest::TestCaseData& tc) override {
    fa::test::failures_in_test_case() = 0;
    if (run_record().cases++ == 0) run_record().first_case = tc.m_name;
  }
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

// The grader's key (tests/grading_mac.hpp), taken out of the environment first thing in main: the
// tests' own code never sees it there, nor in /proc/self/environ (the value is overwritten).
bool take_grade_key(uint8_t key[16]) {
  char* v = std::getenv(fa::grading::kKeyEnv);
  if (v == nullptr) return false;
  const bool ok = fa::grading::parse_key(v, key);
  std::memset(v, '0', std::strlen(v));
  unsetenv(fa::grading::kKeyEnv);
  return ok;
}

// The doctest test case this process was asked for (--test-case=<name>, commas escaped as "\,").
std::string requested_case(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i], flag = "--test-case=";
    if (a.rfind(flag, 0) != 0) continue;
    std::string name;
    for (size_t j = flag.size(); j < a.size(); ++j) {
      if (a[j] == '\\' && j + 1 < a.size() && a[j + 1] == ',') continue;
      name += a[j];
    }
    return name;
  }
  return "";
}

void print_result(const uint8_t key[16], const std::string& fields, const std::string& name) {
  std::cout.flush();
  std::fflush(stdout);
  std::printf("%s\n", fa::grading::result_line(key, fields, name).c_str());
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  uint8_t key[16];
  const bool graded = take_grade_key(key);
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
    if (graded) print_result(key, "skipped=no-gpu", requested_case(argc, argv));
    return 77;
  }
#endif
  std::printf("FA_TEST_SEED=%llu (set FA_TEST_SEED to change the inputs)\n",
              static_cast<unsigned long long>(fa::base_seed()));
  if (const char* v = std::getenv("FA_TEST_VARIANT"); v != nullptr && *v != '\0')
    std::printf("FA_TEST_VARIANT=%s: every case it applies to runs on the lesson's variant %s, the rest on its default\n", v, v);
  const int rc = ctx.run();
  if (graded) {  // only now, after doctest's run has returned: counts an early exit cannot fake
    const RunRecord& r = run_record();
    const doctest::TestRunStats& st = r.stats;
    const std::string fields = "run=" + std::to_string(r.ended ? st.numTestCasesPassingFilters : 0) +
                               " failed=" + std::to_string(r.ended ? st.numTestCasesFailed : 1) +
                               " asserts=" + std::to_string(st.numAsserts) + " asserts_failed=" +
                               std::to_string(st.numAssertsFailed) + " exit=" + std::to_string(rc);
    print_result(key, fields, r.first_case);
  }
  return rc;
}
