// Binds a test executable to the lesson it tests: the only file compiled per executable with
// FA_LESSON_GETTER (the lesson's descriptor function, or its CPU model's), FA_LESSON_DECLARED (what
// its fa_add_lesson line declares: the tests' requirements) and FA_LESSON_NUMBER. The shared suites
// are compiled once and ask these functions.
#include "fa/params.hpp"
#include "support.hpp"

#if !defined(FA_LESSON_GETTER) || !defined(FA_LESSON_NUMBER) || !defined(FA_LESSON_DECLARED)
#error "FA_LESSON_GETTER, FA_LESSON_DECLARED and FA_LESSON_NUMBER are set by fa_add_lesson"
#endif

const fa::LessonInfo& FA_LESSON_GETTER();
fa::LessonInfo FA_LESSON_DECLARED();  // generated from the fa_add_lesson line (cmake/FaLesson.cmake)

namespace fa::test {
const LessonInfo& lesson_under_test() { return FA_LESSON_GETTER(); }
int lesson_number() { return FA_LESSON_NUMBER; }
const Requirements& required() {
  static const Requirements r = requirements_of(FA_LESSON_DECLARED());
  return r;
}
}  // namespace fa::test
