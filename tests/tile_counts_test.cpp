// The tile-count test of a lesson that skips work: a test build of the lesson (FA_COUNT_TILES,
// fa_add_lesson's TILE_COUNTS) records the tiles each work tile visits, and they must be exactly
// the tiles holding a pair its rows see (tests/support.hpp, check_tile_counts). A kernel that
// visits one fully masked tile too many is correct and 3-24% slower; only this test sees it.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "check.hpp"

namespace {

void run(fa::test::Direction dir) {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  const fa::test::Requirements& req = fa::test::required();
  for (int d : req.head_dims)
    for (bool causal : {false, true})
      // 1600 x 1700: long enough that lesson 13 takes its 192-row tiles at head dim 64, causal too,
      // and a multiple of neither 128 nor 192 (a partial tile either way).
      for (auto [sq, sk] : {std::pair{1000, 1000}, std::pair{1600, 1700}, std::pair{129, 300}, std::pair{300, 129},
                            std::pair{1, 128}, std::pair{64, 1}, std::pair{17, 17}}) {
        fa::test::Case c;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        c.head_dim = d;
        c.causal = causal;
        c.batch = 2;
        c.heads_q = lesson.features.gqa ? 4 : 2;
        c.heads_kv = 2;
        FA_CHECK_OUTCOME(fa::test::check_tile_counts(lesson, c, dir));
      }
}

#if FA_TILES_PACKED
// A packed batch (a lesson with varlen): its tiles come from maps, and they must also come
// heaviest first (only these tests see a map in packed order: the output is right, the kernel
// slower). Sequences of every kind of work, one empty; keys as many as queries, and not (then one
// without keys).
void run_packed(fa::test::Direction dir) {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  const fa::test::Requirements& req = fa::test::required();
  for (int d : req.head_dims)
    for (bool causal : {false, true})
      for (bool same : {true, false}) {
        fa::test::Case c;
        const std::vector<int> q = {300, 0, 1000, 17, 640, 129, 64, 33};
        c.set_lengths(q, same ? q : std::vector<int>{400, 5, 900, 17, 700, 1, 1000, 0});
        c.head_dim = d;
        c.causal = causal;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.variant = lesson.variants.empty() ? "" : lesson.variants[0].name;  // the default order, whatever FA_TEST_VARIANT says
        FA_CHECK_OUTCOME(fa::test::check_tile_counts(lesson, c, dir));
      }
}
#endif

}  // namespace

#if FA_TILES_FORWARD
TEST_CASE("tiles: the forward visits exactly the key tiles its rows see") { run(fa::test::Direction::kForward); }
#endif
#if FA_TILES_BACKWARD
TEST_CASE("tiles: the backward visits exactly the query tiles that see its keys") { run(fa::test::Direction::kBackward); }
#endif
#if FA_TILES_FORWARD && FA_TILES_PACKED
TEST_CASE("tiles: a packed batch: the forward visits exactly the key tiles its rows see, heaviest first") {
  run_packed(fa::test::Direction::kForward);
}
#endif
#if FA_TILES_BACKWARD && FA_TILES_PACKED
TEST_CASE("tiles: a packed batch: the backward visits exactly the query tiles that see its keys, heaviest first") {
  run_packed(fa::test::Direction::kBackward);
}
#endif
