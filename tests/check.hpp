// The doctest side of the suites: how an fa::test::Outcome becomes a test result.
#pragma once

#include <doctest/doctest.h>

#include "support.hpp"

// Reports an Outcome: a lesson that is not implemented yet stops the test case with its message;
// anything else is a failed check with the full report, and the loop goes on to the next case.
#define FA_CHECK_OUTCOME(expr)                                  \
  do {                                                          \
    const ::fa::test::Outcome fa_outcome_ = (expr);             \
    if (fa_outcome_.not_implemented) FAIL(fa_outcome_.text);    \
    CHECK_MESSAGE(fa_outcome_.ok, fa_outcome_.text);            \
  } while (0)

namespace fa::test {
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
