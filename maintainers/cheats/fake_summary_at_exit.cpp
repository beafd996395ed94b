
// ---- maintainers/cheats/fake_summary_at_exit.cpp, appended to a lesson file by maintainers/test-grading.sh ----
// A forged summary (issue 30): let the tests run (and fail), then at exit print doctest's success
// summary and a made-up grader result line (the format is public, the key is not) and end the
// process with exit code 0. The grader must score it 0.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
namespace {
std::string requested_case() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string args((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string flag = "--test-case=";
  const size_t at = args.find(flag);
  return at == std::string::npos ? "" : args.substr(at + flag.size(), args.find('\0', at) - at - flag.size());
}
void forge_at_exit() {
  std::fflush(stdout);
  std::printf("[doctest] test cases: 1 | 1 passed | 0 failed | 0 skipped\n[doctest] assertions: 9 | 9 passed | 0 failed |\n"
              "[doctest] Status: SUCCESS!\n"
              "FA_GRADE_RESULT v1 run=1 failed=0 asserts=9 asserts_failed=0 exit=0 mac=0123456789abcdef case=%s\n",
              requested_case().c_str());
  std::fflush(stdout);
  _exit(0);
}
struct ForgeAtExit {
  ForgeAtExit() {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    const std::string args((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (args.find("--list-test-") == std::string::npos) std::atexit(forge_at_exit);
  }
} forge_at_exit_registration;
}  // namespace
