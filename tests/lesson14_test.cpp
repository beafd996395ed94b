// Lesson 14's CPU tests: the plan of plan.hpp, without a GPU. Which query tiles a key block visits
// (against a brute-force search over rows and keys), the order of the deterministic mode's adds,
// dQ's accumulator layout against lesson 13's accumulator layout, and the shared-memory budget.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "13_hopper/wgmma.hpp"
#include "check.hpp"
#include "plan.hpp"

namespace {

// A skeleton stops here with "not implemented yet" and its first TODO: plan.hpp's, then lesson
// 13's layouts (the accumulator layout test uses them).
void require_started() {
  fa::test::require_started("14_hopper_backward", lesson14::kPlanTodosLeft);
  fa::test::require_started("13_hopper", lesson13::kWgmmaTodosLeft);
}

// The first row that sees key j, by search: row i sees key j iff j <= i + seqlen_k - seqlen_q
// (causal, bottom-right aligned), every row without the mask. -1: none.
int first_row_seeing(int j, int seqlen_q, int seqlen_k, bool causal) {
  for (int i = 0; i < seqlen_q; ++i)
    if (!causal || j <= i + seqlen_k - seqlen_q) return i;
  return -1;
}

}  // namespace

TEST_CASE("lesson14: first_query_tile is the tile of the first row that sees the block's first key") {
  require_started();
  for (bool causal : {false, true})
    for (int sq : {1, 63, 64, 65, 300, 1000})
      for (int sk : {1, 127, 128, 129, 130, 700, 1000}) {
        const int offset = sk - sq;
        for (int k0 = 0; k0 < sk; k0 += lesson14::kKeys) {
          const int i = first_row_seeing(k0, sq, sk, causal);
          INFO("seqlen_q ", sq, ", seqlen_k ", sk, ", causal ", causal, ", block at key ", k0);
          REQUIRE(i >= 0);  // bottom-right: the last row sees every key, so every block has work
          CHECK(lesson14::first_query_tile(k0, offset, causal) == i / lesson14::kRows);
        }
      }
}

TEST_CASE("lesson14: the key blocks visiting a query tile are blocks 0 .. last_key_block, one turn each") {
  require_started();
  for (bool causal : {false, true})
    for (int sq : {1, 64, 65, 300, 1000})
      for (int sk : {1, 128, 129, 700, 1000}) {
        const int offset = sk - sq, n_kt = (sk + lesson14::kKeys - 1) / lesson14::kKeys;
        const int n_qt = (sq + lesson14::kRows - 1) / lesson14::kRows;
        for (int qt = 0; qt < n_qt; ++qt) {
          std::vector<int> turns;
          for (int kt = 0; kt < n_kt; ++kt)
            if (lesson14::first_query_tile(kt * lesson14::kKeys, offset, causal) <= qt)
              turns.push_back(lesson14::last_key_block(qt, n_kt, offset, causal) - kt);
          INFO("seqlen_q ", sq, ", seqlen_k ", sk, ", causal ", causal, ", query tile ", qt);
          if (turns.empty()) {  // no block visits it: none of its rows may see a key
            const int last_row = std::min(sq, (qt + 1) * lesson14::kRows) - 1;
            CHECK(causal);
            CHECK(last_row + offset < 0);
            continue;
          }
          std::sort(turns.begin(), turns.end());
          // The turns of the visitors are 0, 1, ..., last: every block adds once, none waits for a
          // turn that never comes.
          for (size_t t = 0; t < turns.size(); ++t) CHECK(turns[t] == int(t));
          CHECK(int(turns.size()) == lesson14::last_key_block(qt, n_kt, offset, causal) + 1);
        }
      }
}

namespace {

// block_tile's blocks for n_bk groups of n_kt key blocks in chunks of `chunk`: checks that each
// (group, key block) is owned by exactly one block, and that a group's key blocks come in order
// (default: key block kt, with more query tiles under the causal mask, before kt + 1; from the
// last: kt + 1, whose dQ adds kt waits for, first). Returns (bk, kt) -> the block that owns it.
std::vector<int64_t> check_block_tiles(int n_kt, int n_bk, int chunk, bool from_last) {
  std::vector<int64_t> index(size_t(n_kt) * n_bk, -1);
  for (int64_t w = 0; w < int64_t(n_kt) * n_bk; ++w) {
    const lesson14::BlockTile t = lesson14::block_tile(w, n_kt, n_bk, chunk, from_last);
    REQUIRE(t.bk >= 0);
    REQUIRE(t.bk < n_bk);
    REQUIRE(t.kt >= 0);
    REQUIRE(t.kt < n_kt);
    CHECK(index[size_t(t.bk) * n_kt + t.kt] == -1);  // no (group, key block) twice
    index[size_t(t.bk) * n_kt + t.kt] = w;
  }
  for (int bk = 0; bk < n_bk; ++bk)
    for (int kt = 0; kt + 1 < n_kt; ++kt) {
      const int64_t lo = index[size_t(bk) * n_kt + kt], hi = index[size_t(bk) * n_kt + kt + 1];
      CHECK((from_last ? hi < lo : lo < hi));
    }
  return index;
}

}  // namespace

TEST_CASE("lesson14: the launch order covers every block once, heaviest first, and never waits ahead") {
  require_started();
  for (int n_kt : {1, 3, 8, 32, 131, 132, 200})
    for (int n_bk : {1, 2, 5, 8, 64})
      for (int sms : {1, 78, 132})
        for (bool from_last : {false, true}) {
          const int chunk = lesson14::launch_chunk(n_kt, n_bk, sms);
          INFO(n_kt, " key blocks, ", n_bk, " groups, ", sms, " SMs (chunk ", chunk, "), from the last ", from_last);
          CHECK(chunk >= 1);
          CHECK(n_bk % chunk == 0);  // equal chunks: no group left to run alone at the end
          if (int64_t(n_kt) * n_bk >= 8 * sms) CHECK(chunk == 1);  // many short blocks: group by group
          CHECK((chunk == 1 || int64_t(chunk) * n_kt <= sms));     // a chunk's blocks fit in one wave
          const std::vector<int64_t> index = check_block_tiles(n_kt, n_bk, chunk, from_last);
          // Heaviest first across groups too: within a chunk, key block 0 of every group comes
          // before key block 1 of any.
          if (!from_last && n_kt > 1)
            for (int bk = 0; bk < n_bk; ++bk)
              for (int other = bk / chunk * chunk; other < std::min(n_bk, bk / chunk * chunk + chunk); ++other)
                CHECK(index[size_t(bk) * n_kt] < index[size_t(other) * n_kt + 1]);
        }
  // block_tile with any chunk, a last chunk narrower than the others included (launch_chunk only
  // returns divisors of n_bk): still every block once, and a group's key blocks in order.
  for (int n_kt : {1, 2, 7})
    for (int n_bk : {1, 3, 5, 8})
      for (int chunk = 1; chunk <= n_bk + 1; ++chunk)
        for (bool from_last : {false, true}) {
          INFO(n_kt, " key blocks, ", n_bk, " groups, chunk ", chunk, ", from the last ", from_last);
          check_block_tiles(n_kt, n_bk, chunk, from_last);
        }
}

TEST_CASE("lesson14: dQ's accumulator holds each float of a share once, where the thread wrote it") {
  require_started();
  // Every split the kernel takes: head dim 64 by keys (default) and by columns (deterministic), 128
  // by columns (both modes).
  auto check = [](auto split, int d) {
    using Split = decltype(split);
    // A warpgroup's share: kRows x cols (d / 2 split by columns, d split by keys); cols / 2 floats a thread.
    const int cols = Split::cols, floats = cols / 2;
    CHECK(cols == (Split::by_keys ? d : d / 2));
    std::vector<int> seen(size_t(lesson14::kRows) * cols, 0);
    for (int tid = 0; tid < 128; ++tid)
      for (int i = 0; i < floats; ++i) {
        const lesson13::RowCol rc = lesson13::acc_element(tid, i);
        const int written = ((i / 4) * 128 + tid) * 4 + i % 4;  // the kernel's add: chunk i / 4, 4 floats a thread
        INFO("head dim ", d, Split::by_keys ? " by keys" : " by columns", ", thread ", tid, ", float ", i, " (row ", rc.row,
             ", column ", rc.col, ")");
        REQUIRE(written >= 0);
        REQUIRE(written < int(seen.size()));
        CHECK(lesson14::dq_share_offset(rc.row, rc.col) == written);  // where the postprocess reads it
        ++seen[size_t(written)];
      }
    CHECK(std::count(seen.begin(), seen.end(), 1) == int(seen.size()));
    // The shares of consecutive tiles tile the accumulator, kRows x d floats a tile.
    for (long long tile : {0LL, 1LL, 7LL}) {
      const long long a = Split::share_start(tile, 1), b = Split::share_start(tile, 2);
      CHECK(a == tile * lesson14::kRows * d);
      CHECK(b == (Split::by_keys ? a : a + lesson14::kRows * cols));  // by keys both add into the whole tile
    }
    // The postprocess reads a row's 8 columns 8 c .. 8 c + 7 as 4 pairs, 4 floats apart.
    for (int r = 0; r < lesson14::kRows; ++r)
      for (int c0 = 0; c0 < cols; c0 += 8)
        for (int t = 0; t < 4; ++t) {
          CHECK(lesson14::dq_share_offset(r, c0 + 2 * t) == lesson14::dq_share_offset(r, c0) + 4 * t);
          CHECK(lesson14::dq_share_offset(r, c0 + 2 * t + 1) == lesson14::dq_share_offset(r, c0) + 4 * t + 1);
        }
  };
  // The default builds: by keys at 64 unless deterministic, by columns at 128.
  CHECK(lesson14::SplitOf<lesson14::Default<64>, false>::by_keys);
  CHECK(!lesson14::SplitOf<lesson14::Default<64>, true>::by_keys);
  CHECK(!lesson14::SplitOf<lesson14::Default<128>, false>::by_keys);
  check(lesson14::DqSplit<64, true>{}, 64);
  check(lesson14::DqSplit<64, false>{}, 64);
  check(lesson14::DqSplit<128, false>{}, 128);
}

TEST_CASE("lesson14: a block's shared memory fits Hopper's 227 KB, every tile on a 1024-byte boundary") {
  require_started();
  // Every build the kernel has (plan.hpp, Builds: kernel.cu instantiates these and no other).
  auto check = [](auto config) {
    using S = lesson14::Smem<decltype(config)>;
    INFO("head dim ", S::D, ", ", S::stages, " stages, ", S::dq_buffers, " dQ buffers");
    CHECK(S::total <= lesson14::kMaxSmem);
    for (int offset : {S::k, S::v, S::q, S::dout, S::ds, S::dq}) CHECK(offset % 1024 == 0);
    CHECK(S::q_bytes % 1024 == 0);
    CHECK(S::ds_bytes % 1024 == 0);
    CHECK(S::lse % 16 == 0);  // bulk copies: 16-byte aligned
    CHECK(S::delta % 16 == 0);
    CHECK(S::bars % 8 == 0);
  };
  std::apply([&](auto... c) { (check(c), ...); }, lesson14::Builds<64>::type{});
  std::apply([&](auto... c) { (check(c), ...); }, lesson14::Builds<128>::type{});
  // A third stage beside two dQ buffers does not fit at head dim 128 (why stages3 takes one there).
  CHECK(lesson14::Smem<lesson14::Config<128, 3, 2, false, false>>::total > lesson14::kMaxSmem);
}

TEST_CASE("lesson14: each variant runs one build of Builds, the default's knobs with the variant's one changed") {
  require_started();
  using lesson14::Knobs;
  auto builds = [](int d) {
    std::vector<Knobs> all;
    auto add = [&](auto... c) { (all.push_back(lesson14::knobs<decltype(c)>()), ...); };
    if (d == 64) std::apply(add, lesson14::Builds<64>::type{});
    else std::apply(add, lesson14::Builds<128>::type{});
    return all;
  };
  for (int d : {64, 128}) {
    const std::vector<Knobs> all = builds(d);
    const Knobs def = lesson14::knobs_of(lesson14::kWriters, d);
    CHECK(def == all.front());  // the default build is Default<d>, Builds' first
    CHECK(def == (d == 64 ? lesson14::knobs<lesson14::Default<64>>() : lesson14::knobs<lesson14::Default<128>>()));
    std::vector<int> used(all.size(), 0);
    for (int v = 0; v < lesson14::kVariants; ++v) {
      INFO("head dim ", d, ", variant ", v);
      const Knobs k = lesson14::knobs_of(v, d);
      const bool sweep = v >= lesson14::kStages2, at_64_only = v == lesson14::kStages2 || v == lesson14::kKvInSmem || v == lesson14::kDqByColumns;
      if (d == 128 && at_64_only) {
        CHECK(k.stages == 0);  // not run at 128 (the variant is declared for head dim 64)
        continue;
      }
      const int n = int(std::count(all.begin(), all.end(), k));
      REQUIRE(n == 1);  // one build, and one only, has the variant's knobs
      ++used[size_t(std::find(all.begin(), all.end(), k) - all.begin())];
      const int changed = (k.stages != def.stages) + (k.dq_buffers != def.dq_buffers) + (k.kv_in_regs != def.kv_in_regs) +
                          (k.dq_by_keys != def.dq_by_keys);
      CHECK(changed == (!sweep ? 0 : v == lesson14::kStages3 && d == 128 ? 2 : 1));
    }
    for (size_t i = 1; i < used.size(); ++i) CHECK(used[i] == 1);  // every sweep build is some variant's, once
  }
}
