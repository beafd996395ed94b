// The doctest side of the suites: how an fa::test::Outcome becomes a test result.
#pragma once

#include <doctest/doctest.h>

#include "support.hpp"

// Reports an Outcome: a lesson that is not implemented yet stops the test case with its message;
// a failure is a failed check, and the loop goes on to the next case. A test case's first failure
// is reported in full (the worst elements, the hints); the next few in a line each, and the rest
// are counted (the test main prints how many at the end of the test case): one bug fails many
// cases, and the first says what the others would.
#define FA_CHECK_OUTCOME(expr)                                                                     \
  do {                                                                                             \
    const ::fa::test::Outcome fa_outcome_ = (expr);                                                \
    if (fa_outcome_.not_implemented) FAIL(fa_outcome_.text);                                       \
    if (!fa_outcome_.ok) {                                                                         \
      const int fa_failure_ = ++::fa::test::failures_in_test_case();                               \
      if (fa_failure_ == 1)                                                                        \
        FAIL_CHECK(fa_outcome_.text);                                                              \
      else if (fa_failure_ <= ::fa::test::kFailuresShown)                                          \
        FAIL_CHECK("also failing: " << ::fa::test::one_line(fa_outcome_));                         \
    }                                                                                              \
  } while (0)

namespace fa::test {
// How many failures of one test case are shown (the first in full).
constexpr int kFailuresShown = 4;
inline std::string one_line(const Outcome& o) { return o.summary.empty() ? o.text.substr(0, o.text.find('\n')) : o.summary; }

// A lesson's CPU tests of its index math start with this: while `todos` (the file's TODOs left)
// is not empty, the test case stops with "not implemented yet", as the suites do.
inline void require_started(const char* lesson_id, const TodoList& todos) {
  try {
    throw_if_todos_left(lesson_id, todos);
  } catch (const NotImplemented& e) {
    FAIL(std::string(e.what()));
  }
}
}  // namespace fa::test
