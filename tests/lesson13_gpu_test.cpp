// Lesson 13 on the GPU: every step of the schedule against the fp64 reference (the forward suite
// runs the default step in depth), and the persistent grid (step 4) with a few blocks only, so
// that each block takes many work tiles: heavy and light causal ones, tails, heads of different
// K/V heads and tiles that see no key. With one block per SM the suite's small shapes give each
// block one tile, and what a block must reset or carry between tiles would go untested. And the
// traced kernel (trace.hpp), which draws the README's timelines: it must compute the same O, and
// its records must account for every work tile and key tile once.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "check.hpp"
#include "fa/cuda_check.hpp"
#include "trace_host.hpp"
#include "trace.hpp"

namespace {
// The traced build (the lesson's fa::Tracer) as its forward: the suite's check_forward runs it like
// any other call (the variant, p.variant, picks the step) and its records are kept for the test.
int g_capacity = 0;
std::vector<lesson13::TraceLane> g_lanes;  // the last traced call's records
void forward_traced(const fa::AttnParams& p, cudaStream_t stream) {
  g_lanes = fa::run_traced(fa::test::lesson_under_test(), p, g_capacity, "the test's capacity", stream);
}
fa::LessonInfo traced_lesson() {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.forward = &forward_traced;
  return lesson;
}

// The key tiles work tile w visits, from the README's numbering (query tile fastest; causal, the
// tiles counted back from the last row, so each head's last query tile first, and a partial one
// holding the first rows; bottom-right aligned): the test's own statement of it.
int key_tiles_of(const fa::test::Case& c, int w) {
  const int n_qtiles = (c.seqlen_q + 127) / 128, rank = w % n_qtiles;
  const int q0 = c.causal ? c.seqlen_q - 128 * (rank + 1) : 128 * rank;
  int k_end = c.seqlen_k;
  if (c.causal) k_end = std::min(c.seqlen_k, std::min(q0 + 128, c.seqlen_q) + c.seqlen_k - c.seqlen_q);
  return k_end > 0 ? (k_end + 127) / 128 : 0;
}

// What a lane's records must say, whatever the timing: it starts with setup and ends with exit, its
// clock never runs backwards, and it visits each work tile's key tiles 0, 1, ... in order, once
// each. A consumer's work tile (wait_q) is followed by its key tiles (softmax) and one epilogue.
// The producer copies a tile's Q (copy_q) after the rendezvous, and step 4's producer some of its
// first key tiles (copy_kv) before it: its copy_kv keys, in order, are each tile's 0 .. n - 1,
// tile after tile in the order of its copy_q records. Returns the first violation, or "" and adds
// the lane's work tiles to `seen`.
std::string check_lane(const fa::test::Case& c, const lesson13::TraceLane& l, std::map<int, int>& seen) {
  namespace ph = lesson13::phase;
  const auto& ev = l.events;
  const std::string where = "block " + std::to_string(l.block) + ", warpgroup " + std::to_string(l.role) + ": ";
  if (ev.size() < 2 || ev.front().phase != ph::kSetup || ev.back().phase != ph::kExit) return where + "not setup ... exit";
  for (size_t i = 1; i < ev.size(); ++i)
    if (ev[i].clock < ev[i - 1].clock) return where + "the clock runs backwards at record " + std::to_string(i);
  for (const lesson13::TraceEvent& e : ev)
    if (e.phase < 0 || e.phase >= ph::kCount) return where + "a record of phase " + std::to_string(e.phase);
  if (l.role == 0) {
    std::vector<int> want, got;
    for (const lesson13::TraceEvent& e : ev)
      if (e.phase == ph::kCopyQ) {
        for (int j = 0; j < key_tiles_of(c, e.key); ++j) want.push_back(j);
        ++seen[e.key];
      } else if (e.phase == ph::kCopyKV) {
        got.push_back(e.key);
      }
    if (got != want)
      return where + "copied " + std::to_string(got.size()) + " key tiles where its work tiles have " + std::to_string(want.size()) +
             ", or out of order";
    return "";
  }
  int work = -1, next_key = 0, epilogues = 0;
  auto close = [&]() -> std::string {
    if (work < 0) return "";
    if (next_key != key_tiles_of(c, work))
      return where + "work tile " + std::to_string(work) + " visited " + std::to_string(next_key) + " key tiles, not " +
             std::to_string(key_tiles_of(c, work));
    if (epilogues != 1) return where + "work tile " + std::to_string(work) + " had " + std::to_string(epilogues) + " epilogues";
    ++seen[work];
    return "";
  };
  for (const lesson13::TraceEvent& e : ev) {
    if (e.phase == ph::kWaitQ) {
      if (std::string bad = close(); !bad.empty()) return bad;
      work = e.key;
      next_key = epilogues = 0;
    } else if (e.phase == ph::kSoftmax) {
      if (work < 0 || e.key != next_key) return where + "key tile " + std::to_string(e.key) + " out of order";
      ++next_key;
    } else if (e.phase == ph::kEpilogue) {
      ++epilogues;
    }
  }
  return close();
}
}  // namespace

TEST_CASE("lesson13: every step of the schedule matches the reference") {
  // Every variant: steps 1-4, step 4 with two or three consumer warpgroups, and on 1, 2 and 5
  // blocks; plus 640 x 1000 at each head dim, dtype and mask: 5 query tiles of 8 key tiles (causal:
  // 4 to 8; with three consumers at head dim 64, 4 query tiles of 192 rows).
  const std::vector<fa::test::Case> small = fa::test::variant_cases({64, 128});
  std::vector<fa::test::Case> cases = small;
  for (const fa::test::Case& c : small)
    if (c.seqlen_q == 129) {
      fa::test::Case longer = c;
      longer.seqlen_q = 640;
      longer.seqlen_k = 1000;
      cases.push_back(longer);
    }
  fa::test::check_every_variant(cases);
}

TEST_CASE("lesson13: the persistent grid with fewer blocks than work tiles") {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  // Step 4 as the call chooses (at head dim 64: three consumer warpgroups non-causal, two causal at
  // these lengths), and with the consumers fixed: two (step4-2wg) and three (step4-3wg, 192-row
  // work tiles at head dim 64).
  for (const char* variant : {"step4-1-block", "step4-5-blocks", "step4-2wg-2-blocks", "step4-3wg-1-block", "step4-3wg-5-blocks"})
    for (int d : {64, 128})
      for (bool causal : {false, true})
        // 2 x 6 heads of 2 K/V heads; 700 x 700 (6 query tiles of 1 to 6 key tiles, causal; 4 of
        // 192 rows with three consumers) and 500 x 300 (causal: the query tile of the first rows,
        // of 128 or of 192, sees no key).
        for (auto [sq, sk] : {std::pair{700, 700}, std::pair{500, 300}}) {
          fa::test::Case c = fa::test::dense_case(sq, sk, d, d == 64 ? fa::DType::kBF16 : fa::DType::kF16, causal, 6, 2, 2);
          c.variant = variant;
          FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
        }
}

TEST_CASE("lesson13: a batch above 65535 runs on the persistent grid and is rejected by steps 1-3") {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  fa::test::Case c;
  c.batch = 66000;  // past grid z's 65535: steps 1-3 cannot launch it, step 4 takes it as work tiles
  c.seqlen_q = c.seqlen_k = 3;
  c.causal = true;
  c.variant = "step4";
  FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
  c.variant = "step3";
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams&) {}, "at most 65535"));
}

TEST_CASE("lesson13: the traced kernel computes the same O, and its trace accounts for every work tile and key tile once") {
  const fa::LessonInfo lesson = traced_lesson();
  g_capacity = 1 << 12;
  for (auto [variant, step, blocks] : {std::tuple{"step1", 1, 0}, std::tuple{"step2", 2, 0}, std::tuple{"step3", 3, 0},
                                       std::tuple{"step4-2wg", 4, 0}, std::tuple{"step4-2wg-2-blocks", 4, 2}}) {
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        // 2 x 3 heads of 1 K/V head, 300 x 350: 3 query tiles, 3 key tiles (causal: 3, 2 and 1),
        // 18 work tiles. Causal, the numbering matters here: with the tiles counted from row 0 the
        // same three tiles would visit 3, 3 and 2 key tiles (key_tiles_of above counts them back from
        // the last row, as the kernel must).
        fa::test::Case c = fa::test::dense_case(300, 350, d, fa::DType::kF16, causal, 3, 1, 2);
        c.variant = variant;
        INFO("variant ", variant);
        g_lanes.clear();
        FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
        const int n_work = 2 * 3 * 3;
        const size_t expect_lanes = 3 * size_t(step < 4 ? n_work : blocks > 0 ? blocks : std::min(n_work, fa::current_device().sm_count));
        REQUIRE(g_lanes.size() == expect_lanes);
        for (int role = 0; role < 3; ++role) {
          std::map<int, int> seen;  // work tile -> how many lanes of this role took it
          for (const lesson13::TraceLane& l : g_lanes)
            if (l.role == role) {
              const std::string bad = check_lane(c, l, seen);
              CHECK_MESSAGE(bad.empty(), bad);
            }
          CHECK(seen.size() == size_t(n_work));
          for (const auto& [w, n] : seen) CHECK_MESSAGE((w >= 0 && w < n_work && n == 1), "work tile ", w, " taken ", n, " times");
        }
      }
  }
}

TEST_CASE("lesson13: a trace that overflows its capacity, asks for bf16 or three consumer warpgroups, is an error, not a shorter trace") {
  const fa::LessonInfo lesson = traced_lesson();
  fa::test::Case c;
  c.seqlen_q = c.seqlen_k = 300;
  c.variant = "step2";
  g_capacity = 8;  // a consumer warpgroup records about 8 events per key tile: 3 key tiles do not fit
  const fa::test::Outcome over = fa::test::check_forward(lesson, c);
  CHECK_FALSE(over.ok);
  CHECK_MESSAGE(over.text.find("more than the capacity of 8") != std::string::npos, over.text);
  g_capacity = 1 << 12;
  c.dtype = fa::DType::kBF16;
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams&) {}, "fp16 only"));
  // Three consumer warpgroups have no traced build; at head dim 128 step4-3wg has two.
  c.dtype = fa::DType::kF16;
  c.variant = "step4-3wg";
  c.head_dim = 64;
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams&) {}, "two consumer warpgroups only"));
  c.variant = "step4";  // step 4 itself takes three at head dim 64 non-causal
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams&) {}, "two consumer warpgroups only"));
  c.head_dim = 128;
  FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
}
