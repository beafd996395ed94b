
// ---- maintainers/cheats/exit0_static_init.cpp, appended to a lesson file by maintainers/test-grading.sh ----
// A forged pass (issue 30): before main, print doctest's success lines and exit 0, unless doctest is
// asked to list the test cases (the build lists them). Every test "passes" by its exit code; the
// grader must score it 0 (no signed result line).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
namespace {
struct ForgedPassBeforeMain {
  ForgedPassBeforeMain() {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    const std::string args((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (args.find("--list-test-cases") != std::string::npos || args.find("--list-test-suites") != std::string::npos) return;
    std::printf("[doctest] test cases: 1 | 1 passed | 0 failed | 0 skipped\n[doctest] assertions: 1 | 1 passed | 0 failed |\n"
                "[doctest] Status: SUCCESS!\n");
    std::fflush(stdout);
    std::_Exit(0);
  }
} forged_pass_before_main;
}  // namespace
