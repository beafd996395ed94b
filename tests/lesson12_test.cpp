// Lesson 12's CPU tests: the index math of plan.hpp against brute force, without a GPU: the work
// of a tile on each side (the counts the heaviest-first map sorts by, and the loop bounds the
// kernels use), the sort buckets, the padded rows of the backward's statistics, and the gate's
// anchor.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../08_pipelining/tiles.hpp"  // the forward's configurations, and kArchs
#include "plan.hpp"
#include "check.hpp"

namespace {

void require_started() { fa::test::require_started("12_gqa_varlen_gate", lesson12::kPlanTodosLeft); }

// Query i of a sequence of len_q queries and len_k keys sees key j (bottom-right aligned causal mask).
bool visible(int i, int j, int len_q, int len_k, bool causal) { return !causal || j <= i + len_k - len_q; }

// Sequences with lengths around the tile edges, equal and unequal, and empty on either side.
const std::vector<std::pair<int, int>> kLengths = {{1, 1},     {17, 17},   {64, 64},  {65, 65},   {128, 128}, {129, 129},
                                                   {300, 300}, {100, 300}, {300, 100}, {1, 1000}, {1000, 1},  {64, 1},
                                                   {0, 7},     {7, 0},     {0, 0},    {200, 128}};

}  // namespace

TEST_CASE("lesson12: tiles_of is the ceiling of len / tile") {
  require_started();
  for (int tile : {1, 16, 64, 128})
    for (int len = 0; len < 400; ++len) {
      const int n = lesson12::tiles_of(len, tile);
      CHECK(n * tile >= len);
      CHECK((n == 0 || (n - 1) * tile < len));
    }
}

TEST_CASE("lesson12: key_tiles_visited is the number of key tiles up to the last one a query tile sees") {
  require_started();
  for (bool causal : {false, true})
    for (int rows : {64, 128})
      for (int keys : {64, 128})
        for (auto [lq, lk] : kLengths)
          for (int t = 0; t < lesson12::tiles_of(lq, rows); ++t) {
            // Visibility grows with j's distance below the diagonal only, so the tiles a query tile
            // needs are a prefix: count them, and check none past the prefix is needed.
            int last = -1;
            for (int kt = 0; kt < lesson12::tiles_of(lk, keys); ++kt)
              for (int i = t * rows; i < std::min(lq, (t + 1) * rows); ++i)
                for (int j = kt * keys; j < std::min(lk, (kt + 1) * keys); ++j)
                  if (visible(i, j, lq, lk, causal)) last = std::max(last, kt);
            INFO("causal ", causal, " rows ", rows, " keys ", keys, " len_q ", lq, " len_k ", lk, " tile ", t);
            CHECK(lesson12::key_tiles_visited(t, rows, keys, lq, lk, causal) == last + 1);
          }
}

TEST_CASE("lesson12: query_tiles_visited counts the query tiles that see a key tile") {
  require_started();
  for (bool causal : {false, true})
    for (int rows : {64, 128})
      for (int keys : {64, 128})
        for (auto [lq, lk] : kLengths)
          for (int t = 0; t < lesson12::tiles_of(lk, keys); ++t) {
            int seeing = 0;
            for (int qt = 0; qt < lesson12::tiles_of(lq, rows); ++qt) {
              bool sees = false;
              for (int i = qt * rows; i < std::min(lq, (qt + 1) * rows) && !sees; ++i)
                for (int j = t * keys; j < std::min(lk, (t + 1) * keys) && !sees; ++j) sees = visible(i, j, lq, lk, causal);
              seeing += sees;
            }
            INFO("causal ", causal, " rows ", rows, " keys ", keys, " len_q ", lq, " len_k ", lk, " tile ", t);
            CHECK(lesson12::query_tiles_visited(t, keys, rows, lq, lk, causal) == seeing);
          }
}

TEST_CASE("lesson12: bucket_of puts heavier tiles in lower buckets, every bucket in range") {
  require_started();
  CHECK(lesson12::bucket_of(0) == lesson12::kBuckets - 1);
  CHECK(lesson12::bucket_of(lesson12::kBuckets - 1) == 0);
  CHECK(lesson12::bucket_of(1 << 20) == 0);  // more work than buckets: the heaviest bucket
  for (int w = 0; w < 3 * lesson12::kBuckets; ++w) {
    const int b = lesson12::bucket_of(w);
    CHECK((b >= 0 && b < lesson12::kBuckets));
    if (w > 0) CHECK(b <= lesson12::bucket_of(w - 1));
    if (w < lesson12::kBuckets) CHECK(b == lesson12::kBuckets - 1 - w);  // distinct work, distinct bucket
  }
}

TEST_CASE("lesson12: stat_row gives every row of every head and sequence its own slot, tiles whole") {
  require_started();
  const int R = lesson12::kStatRows, heads = 3;
  SUBCASE("varlen: sequences stacked per head, each padded to whole tiles") {
    const std::vector<int> lens = {1, 64, 0, 65, 200, 7};
    std::vector<int> tile_start(lens.size() + 1, 0);
    for (size_t b = 0; b < lens.size(); ++b) tile_start[b + 1] = tile_start[b] + lesson12::tiles_of(lens[b], R);
    const int64_t per_head = int64_t(tile_start.back()) * R;
    std::set<int64_t> seen;
    for (int h = 0; h < heads; ++h)
      for (size_t b = 0; b < lens.size(); ++b)
        for (int i = 0; i < lesson12::tiles_of(lens[b], R) * R; ++i) {  // the padding rows are written too
          const int64_t row = lesson12::stat_row(true, int(b), h, i, heads, per_head, tile_start[b]);
          INFO("head ", h, " sequence ", b, " row ", i);
          CHECK((row >= 0 && row < heads * per_head));
          CHECK(seen.insert(row).second);
          if (i % R == 0) CHECK(row % R == 0);  // a tile starts on a whole tile: its loads are aligned
        }
    CHECK(int64_t(seen.size()) == heads * per_head);  // no slot unused: the padding is the only slack
  }
  SUBCASE("dense: (batch, heads, rows padded to whole tiles)") {
    const int batch = 2, seqlen = 130;
    const int64_t per_head = int64_t(lesson12::tiles_of(seqlen, R)) * R;
    std::set<int64_t> seen;
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < per_head; ++i) {
          const int64_t row = lesson12::stat_row(false, b, h, i, heads, per_head, 0);
          CHECK((row >= 0 && row < batch * heads * per_head));
          CHECK(seen.insert(row).second);
        }
  }
}

TEST_CASE("lesson12: gate_anchor is the key position of a tile's first row, inside the keys") {
  require_started();
  for (auto [lq, lk] : kLengths) {
    if (lk == 0) continue;  // no keys: the kernels read no G
    for (int q0 = 0; q0 < std::max(lq, 1); q0 += 64) {
      const int a = lesson12::gate_anchor(q0, lq, lk), pos = q0 + lk - lq;
      INFO("len_q ", lq, " len_k ", lk, " q0 ", q0);
      CHECK((a >= 0 && a < lk));
      if (pos >= 0 && pos < lk) CHECK(a == pos);  // the row's own position: its G - anchor is exactly 0
      if (pos < 0) CHECK(a == 0);
      if (pos >= lk) CHECK(a == lk - 1);
    }
  }
}

// Lesson 12's kernels on each GPU a student may have (lesson 08's kArchs): the forward takes lesson
// 08's configuration for the GPU, or with the gate the one plan.hpp names in place of the sm_90
// choice (as kernel.cu's gated); the backward takes lesson 11's, and its dQ pass. The
// kernels also declare __shared__ variables of their own, which the GPU's limit per block counts
// beside the dynamic tiles: at most 1280 bytes under nvcc 13.0 (ptxas -v, the gated dK/dV kernel),
// so 2 KB is kept for them. A kernel over the limit is refused by fa::allow_smem before it launches
// (fa::CudaError): for the backward at d = 128 (145 KB) on the 99 KB GPUs, as in lesson 11.
TEST_CASE("lesson12: on each GPU the forward fits its shared memory, the backward too but d = 128 on the 99 KB GPUs") {
  require_started();
  constexpr int kStatic = 2048;
  const auto refused = [](int sm, int d) { return d == 128 && (sm == 86 || sm == 89 || sm == 120); };
  for (const lesson08::Arch& a : lesson08::kArchs)
    for (int d : {64, 128}) {
      const int chosen = lesson08::config_for(a.sm, d);
      REQUIRE(chosen >= 0);
      for (bool gate : {false, true}) {
        const bool gated = gate && chosen == lesson08::config_for(90, d);
        const int i = gated ? (d == 64 ? lesson12::kFwdGate64 : lesson12::kFwdGate128) : chosen;
        const int bytes = lesson08::smem_bytes(lesson08::kConfigs[i]) + kStatic;
        const std::string with = gate ? ", with the gate" : "";
        CHECK(lesson08::kConfigs[i].head_dim == d);
        CHECK_MESSAGE(bytes <= a.smem_per_block, "sm_", a.sm, ", head_dim ", d, with, ": the forward's configuration ", i,
                      " needs ", bytes, " bytes of shared memory with 2 KB of its own, the limit is ", a.smem_per_block);
      }
      const int i = lesson11::config_for(d);
      REQUIRE(i >= 0);
      const int dkdv = lesson11::smem_bytes(lesson11::kConfigs[i]) + kStatic, dq = lesson11::dq_smem_bytes(d) + kStatic;
      const bool runs = dkdv <= a.smem_per_block && dq <= a.smem_per_block;
      const std::string why = runs ? "it fits, but this test lists it as refused (README: no fallback): update both"
                                   : "over the limit: fa::allow_smem throws on this GPU";
      CHECK_MESSAGE(runs != refused(a.sm, d), "sm_", a.sm, ", head_dim ", d, ": the backward's dK/dV kernel (lesson 11's ",
                    "configuration ", i, ") needs ", dkdv, " bytes of shared memory with 2 KB of its own and the dQ pass ", dq,
                    ", the limit is ", a.smem_per_block, ": ", why);
    }
}
