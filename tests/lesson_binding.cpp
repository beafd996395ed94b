// Binds a test executable to the lesson it tests: the only file compiled per executable with
// FA_LESSON_GETTER (the lesson's descriptor function) and FA_LESSON_NUMBER (its requirements).
// The shared suites are compiled once and ask these two functions.
#include "fa/params.hpp"
#include "support.hpp"

#if !defined(FA_LESSON_GETTER) || !defined(FA_LESSON_NUMBER)
#error "FA_LESSON_GETTER and FA_LESSON_NUMBER are set by fa_add_lesson"
#endif

const fa::LessonInfo& FA_LESSON_GETTER();

namespace fa::test {
const LessonInfo& lesson_under_test() { return FA_LESSON_GETTER(); }
int lesson_number() { return FA_LESSON_NUMBER; }
}  // namespace fa::test
