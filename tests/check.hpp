// The doctest side of the suites: how an fa::test::Outcome becomes a test result.
#pragma once

#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

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

// Every variant of the lesson under test that runs direction `dir` (variants_for), on each case at
// its head dim: the case's variant set by name, checked against the reference (a failure's report
// names the variant). A lesson's own tests call it with the shapes its variants need.
inline void check_every_variant(const std::vector<Case>& cases, Direction dir = Direction::kForward) {
  const LessonInfo& l = lesson_under_test();
  for (const Case& base : cases)
    for (int v : variants_for(l, dir, base.head_dim)) {
      Case c = base;
      c.variant = l.variants.empty() ? "" : l.variants[v].name;
      FA_CHECK_OUTCOME(dir == Direction::kForward ? check_forward(l, c) : check_backward(l, c));
    }
}

// The lesson under test declares exactly the variants `tested`, in this order (the first is its
// default): a lesson's tests that run its variants by name call it, so a new variant must be
// added to them. A failure names both lists.
inline void check_declared_variants(const std::vector<std::string>& tested) {
  std::vector<std::string> declared;
  for (const Variant& v : lesson_under_test().variants) declared.push_back(v.name);
  auto join = [](const std::vector<std::string>& names) {
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
    return all;
  };
  CHECK_MESSAGE(declared == tested, "the lesson declares {" << join(declared) << "}, these tests run {" << join(tested) << "}");
}

// The small cases a variant is run on: both dtypes, causal and not, at each head dim; tails on both
// sides and seqlen_q != seqlen_k both ways; two query heads on one K/V head.
inline std::vector<Case> variant_cases(std::initializer_list<int> head_dims) {
  std::vector<Case> cases;
  for (int d : head_dims)
    for (DType t : {DType::kF16, DType::kBF16})
      for (bool causal : {false, true})
        for (auto [sq, sk] : {std::pair{1, 1}, std::pair{129, 129}, std::pair{70, 300}, std::pair{300, 130}})
          cases.push_back(dense_case(sq, sk, d, t, causal, 2, 1));
  return cases;
}

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
