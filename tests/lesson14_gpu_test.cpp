// Lesson 14 on the GPU, beyond the backward suite: the shapes where a K/V-stationary Hopper
// backward goes wrong quietly. Many key blocks adding into one query tile's dQ (the dQ writers'
// bulk reduce-adds, and the ordered ones of the deterministic mode), the group loop of GQA and MQA
// over several query tiles, one query against many keys and the reverse, rows that see no key,
// tails in both lengths at once, the third dQ path (part 1's atomics: variant atomic), and the dQ
// staging buffers under a writer that lags (variant stress); both dtypes and head dims, against the
// fp64 reference gradients.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "check.hpp"
#include "trace_host.hpp"

namespace {

fa::test::Case make(int sq, int sk, int d, fa::DType t, bool causal, int hq, int hkv) {
  return fa::test::dense_case(sq, sk, d, t, causal, hq, hkv);
}

}  // namespace

TEST_CASE("lesson14: many key blocks per query tile, GQA and MQA groups, tails in both lengths") {
  // 333 = 5 x 64 + 13 queries on 400 = 3 x 128 + 16 keys: four key blocks add into each query
  // tile's dQ, the last of each length a tail. Every (head dim, causal, dQ mode) once, the dtype
  // and the group (4 query heads on 1 K/V head, 6 on 2) alternating.
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  int n = 0;
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (bool det : {false, true}) {
        const bool odd = n++ % 2 == 1;
        const fa::DType t = odd ? fa::DType::kBF16 : fa::DType::kF16;
        const int hq = odd ? 6 : 4, hkv = odd ? 2 : 1;
        INFO(hq, " query heads on ", hkv, " kv heads, ", det ? "deterministic" : "bulk", " dQ");
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(333, 400, d, t, causal, hq, hkv), det));
      }
}

TEST_CASE("lesson14: one query against many keys, many queries against one key, rows that see no key") {
  // Causal and bottom-right aligned, every key is seen by the last row, so every key block visits
  // at least one query tile; with 300 queries on 130 keys, rows 0-169 see no key (LSE = +inf) and
  // the key blocks start at different query tiles.
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (int d : {64, 128})
    for (bool det : {false, true})
      for (auto [sq, sk] : {std::pair{1, 700}, std::pair{700, 1}, std::pair{300, 130}}) {
        INFO(sq, " queries on ", sk, " keys, ", det ? "deterministic" : "bulk", " dQ");
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(sq, sk, d, fa::DType::kF16, true, 2, 1), det));
      }
}

TEST_CASE("lesson14: dQ by atomics (variant atomic) matches the reference too") {
  // The default adds dQ with the dQ writers' bulk reduce-adds and the deterministic mode with the
  // ordered ones; part 1's atomics from the consumers are the third path (README, "dQ"): the same
  // shapes as above, once. The lesson's variants are these tests': the default, "atomic" here,
  // "stress" and the sweep's below (a new one must be tested too).
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  fa::test::check_declared_variants({"writers", "atomic", "stress", "stages2", "stages3", "one-dq-buffer", "kv-in-smem", "dq-by-columns"});
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      for (fa::test::Case c : {make(333, 400, d, d == 64 ? fa::DType::kF16 : fa::DType::kBF16, causal, 6, 2),
                               make(1, 700, d, fa::DType::kF16, causal, 4, 1)}) {
        c.variant = "atomic";
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson, c));
      }
    }
}

TEST_CASE("lesson14: deterministic mode with more key blocks than fit on the GPU, and bitwise across runs") {
  // 64 queries on 40,000 keys: 313 key blocks of one head, more than a GPU holds at once (one block
  // per SM), so blocks wait for their turn to add dQ while others are not yet running. Blocks may
  // only wait for blocks launched before them, or this hangs (ctest's timeout ends it).
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      INFO("head dim ", d, ", causal ", causal);
      FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(64, 40000, d, fa::DType::kF16, causal, 1, 1), true));
    }
  // Several groups in the launch order: 2 batches x 2 K/V heads (GQA 2) x 313 key blocks.
  {
    fa::test::Case c = make(64, 40000, 64, fa::DType::kF16, true, 4, 2);
    c.batch = 2;
    INFO("2 batches, 4 query heads on 2 K/V heads");
    FA_CHECK_OUTCOME(fa::test::check_backward(lesson, c, true));
  }
  // Bitwise across runs where the suite does not look: six query heads on two K/V heads, four key
  // blocks per query tile, at head dim 64 in bf16 and 128 in fp16.
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      INFO("head dim ", d, ", causal ", causal);
      fa::test::Case c = make(333, 400, d, d == 64 ? fa::DType::kBF16 : fa::DType::kF16, causal, 6, 2);
      FA_CHECK_OUTCOME(fa::test::check_backward_deterministic(lesson, c));
    }
}

TEST_CASE("lesson14: dQ staging under a lagging writer (variant stress), default and deterministic") {
  // The dQ writers wait up to about 8 us before each add, so the consumers run ahead and reach each
  // staging buffer while the previous share in it may still be unread: a buffer released too early
  // (before its bulk reduce-add has read it) loses a share and adds another twice. Four key blocks
  // per query tile, six query tiles per head, GQA 4/1: 24 tiles a block, so each buffer is reused.
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (int d : {64, 128})
    for (bool det : {false, true}) {
      INFO("head dim ", d, ", ", det ? "deterministic" : "bulk", " dQ");
      fa::test::Case c = make(333, 400, d, fa::DType::kF16, d == 128, 4, 1);
      c.variant = "stress";
      FA_CHECK_OUTCOME(fa::test::check_backward(lesson, c, det));
    }
}

TEST_CASE("lesson14: the sweep's builds (variants stages2, stages3, one-dq-buffer, kv-in-smem, dq-by-columns)") {
  // Each changes one knob of the default build (plan.hpp, Config): the ring's depth, the dQ
  // staging buffers, where S^T and dP^T read K and V, how the warpgroups split dQ. Each at its head
  // dims, default and deterministic dQ, causal and not: many key blocks a query tile with GQA (18
  // tiles a block, 6 query tiles x 3 heads, so each ring stage and staging buffer is reused), and the tails of
  // both lengths with rows that see no key.
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  int n = 0;
  for (const char* name : {"stages2", "stages3", "one-dq-buffer", "kv-in-smem", "dq-by-columns"}) {
    const int v = fa::variant_index(lesson, name);
    for (int d : {64, 128}) {
      if (!fa::variant_applies(lesson, v, fa::Variant::Pass::kBackward, d)) continue;
      for (bool causal : {false, true})
        for (bool det : {false, true}) {
          const fa::DType t = n++ % 2 ? fa::DType::kBF16 : fa::DType::kF16;
          for (fa::test::Case c : {make(333, 400, d, t, causal, 6, 2), make(70, 300, d, t, causal, 2, 1), make(300, 130, d, t, causal, 2, 1)}) {
            c.variant = name;
            INFO(name, ", ", det ? "deterministic" : "bulk", " dQ");
            FA_CHECK_OUTCOME(fa::test::check_backward(lesson, c, det));
          }
        }
    }
  }
}

namespace {

// The traced build (the lesson's fa::Tracer) as its backward: the suite's check_backward runs it
// like any other call, and its records are kept for the test as (block, clock, role, key, phase).
struct Record {
  long long block, clock;
  int role, key;
  std::string phase;
};
int g_capacity = 1 << 13;
std::vector<Record> g_records;  // the last traced call's
void backward_traced(const fa::AttnParams& p, cudaStream_t stream) {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  g_records.clear();
  for (const fa::TraceLane& l : fa::run_traced(lesson, p, g_capacity, "the test's capacity", stream))
    for (const fa::TraceEvent& e : l.events) g_records.push_back({l.block, e.clock, l.role, e.key, lesson.tracer.phase_name(e.phase)});
}
fa::LessonInfo traced_lesson() {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.backward = &backward_traced;
  return lesson;
}
// A case of the traced build: the default variant (the build takes it alone), whatever
// FA_TEST_VARIANT says.
fa::test::Case traced_case(int d, fa::DType t) {
  fa::test::Case c = make(333, 400, d, t, true, 4, 2);
  c.variant = "writers";
  return c;
}

}  // namespace

TEST_CASE("lesson14: the traced kernel computes the same gradients, and its trace accounts for every tile once per key block") {
  // The traced build (README, "How to profile") must give the right gradients,
  // and its records must show every block's five recording threads from setup to exit, in clock
  // order, each tile's phases in the order trace.hpp lists them, and each query tile copied,
  // waited for by both consumer warpgroups and added by both dQ writers once for each key block
  // that sees it (causal, bottom-right aligned: the key blocks kt with kt x 128 <= (qt + 1) x 64
  // - 1 + seqlen_k - seqlen_q): the test's own statement.
  const fa::LessonInfo lesson = traced_lesson();
  g_capacity = 1 << 13;
  for (int d : {64, 128}) {
    const fa::test::Case c = traced_case(d, fa::DType::kF16);
    INFO("head dim ", d);
    g_records.clear();
    FA_CHECK_OUTCOME(fa::test::check_backward(lesson, c));
    const std::vector<Record> rec = g_records;
    REQUIRE(!rec.empty());
    const int n_kt = (c.seqlen_k + 127) / 128, n_qt = (c.seqlen_q + 63) / 64, offset = c.seqlen_k - c.seqlen_q;
    const long long blocks = (long long)n_kt * c.heads_kv * c.batch;
    std::map<std::pair<long long, int>, std::vector<const Record*>> lanes;
    for (const Record& r : rec) lanes[{r.block, r.role}].push_back(&r);
    CHECK(lanes.size() == size_t(blocks * 5));
    // Each role's records: setup, then per tile its phases in order, then (consumers) the
    // epilogue, then exit.
    const std::vector<std::string> producer = {"wait_empty", "copy"}, writer = {"wait_share", "reduce", "wait_read"},
                                   consumer = {"wait_tile", "issue_s_dp", "wait_s", "exp", "wait_dp", "ds", "issue_dv_store_ds",
                                               "barrier", "issue_dq_dk", "wait_dv_dq", "dq_out", "wait_dk"};
    for (const auto& [lane, ev] : lanes) {
      INFO("block ", lane.first, ", role ", lane.second);
      for (size_t i = 1; i < ev.size(); ++i) CHECK(ev[i]->clock >= ev[i - 1]->clock);
      const int role = lane.second;  // 0: producer, 1 and 2: consumers, 3 and 4: writers
      const bool is_consumer = role == 1 || role == 2;
      const std::vector<std::string>& tile = role == 0 ? producer : is_consumer ? consumer : writer;
      std::vector<std::string> want = {"setup"};
      const size_t tail = is_consumer ? 2 : 1;  // epilogue and exit, or exit
      const size_t tiles = ev.size() >= 1 + tail ? (ev.size() - 1 - tail) / tile.size() : 0;
      for (size_t t = 0; t < tiles; ++t) want.insert(want.end(), tile.begin(), tile.end());
      if (tail == 2) want.push_back("epilogue");
      want.push_back("exit");
      std::vector<std::string> got;
      for (const Record* r : ev) got.push_back(r->phase);
      CHECK(got == want);
    }
    // (role, phase) -> tile -> times recorded
    std::map<std::pair<int, std::string>, std::map<int, int>> seen;
    for (const Record& r : rec)
      if (r.phase == "copy" || r.phase == "wait_tile" || r.phase == "reduce") ++seen[{r.role, r.phase}][r.key];
    std::map<int, int> want;  // tile -> the key blocks that see it
    for (int bh = 0; bh < c.batch * c.heads_q; ++bh)
      for (int qt = 0; qt < n_qt; ++qt)
        for (int kt = 0; kt < n_kt; ++kt)
          if (kt * 128 <= (qt + 1) * 64 - 1 + offset) ++want[bh * n_qt + qt];
    const std::vector<std::pair<int, std::string>> per_tile = {{0, "copy"}, {1, "wait_tile"}, {2, "wait_tile"}, {3, "reduce"}, {4, "reduce"}};
    for (const auto& rp : per_tile) {
      INFO("role ", rp.first, ", phase ", rp.second);
      CHECK(seen[rp] == want);
    }
  }
}

TEST_CASE("lesson14: a trace that overflows its capacity, or asks for bf16, is an error, not a shorter trace") {
  // Also the deterministic mode, which the traced build does not have.
  const fa::LessonInfo lesson = traced_lesson();
  g_capacity = 4;  // a consumer records 12 events a tile: 6 tiles do not fit in 4
  const fa::test::Outcome over = fa::test::check_backward(lesson, traced_case(64, fa::DType::kF16));
  CHECK_FALSE(over.ok);
  CHECK_MESSAGE(over.text.find("more than the capacity of 4") != std::string::npos, over.text);
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, traced_case(64, fa::DType::kBF16), [](fa::AttnParams&) {},
                                            "fp16 and the default dQ mode only", fa::test::Direction::kBackward));
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, traced_case(128, fa::DType::kF16),
                                            [](fa::AttnParams& p) { p.deterministic = true; }, "fp16 and the default dQ mode only",
                                            fa::test::Direction::kBackward));
  // A build of the sweep (variant stages3) is not the traced one either.
  fa::test::Case sweep = traced_case(128, fa::DType::kF16);
  sweep.variant = "stages3";
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, sweep, [](fa::AttnParams&) {}, "of the default build", fa::test::Direction::kBackward));
  g_capacity = 1 << 13;
}
