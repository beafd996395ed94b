// Lesson 13's CPU tests: the layouts of wgmma.hpp, without a GPU. The swizzle is a permutation;
// a descriptor's fields round-trip; every element wgmma reads through the K-major and MN-major
// descriptors of each k16 step (the PTX ISA's canonical 128-byte-swizzle layouts, as wgmma.hpp
// models them) is the element TMA stored there; the accumulator and the register A operand cover
// their tiles once, and P's accumulator registers are O's A operand in place.
#include <doctest/doctest.h>

#include <set>
#include <utility>

#include "check.hpp"
#include "wgmma.hpp"

namespace {
void require_started() { fa::test::require_started("13_hopper", lesson13::kWgmmaTodosLeft); }
}  // namespace

TEST_CASE("lesson13: the 128-byte swizzle permutes the 16-byte chunks of each 128-byte row") {
  require_started();
  std::set<uint32_t> seen;
  for (uint32_t a = 0; a < 4096; ++a) {
    const uint32_t s = lesson13::swizzle128(a);
    CHECK(s / 128 == a / 128);  // the same row
    CHECK(s % 16 == a % 16);    // the same byte of its chunk
    seen.insert(s);
  }
  CHECK(seen.size() == 4096u);
  CHECK(lesson13::swizzle128(0 * 128 + 16) == 16);         // row 0 unchanged
  CHECK(lesson13::swizzle128(3 * 128 + 16) == 3 * 128 + 32);  // row 3, chunk 1 -> chunk 1 ^ 3 = 2
}

TEST_CASE("lesson13: tile_offset places every element of a tile once, inside the tile") {
  require_started();
  for (int rows : {64, 128})
    for (int d : {64, 128}) {
      std::set<uint32_t> seen;
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < d; ++c) {
          const uint32_t off = lesson13::tile_offset(rows, r, c);
          CHECK(off % 2 == 0);
          CHECK(off < uint32_t(rows * d * 2));
          seen.insert(off);
        }
      CHECK(seen.size() == size_t(rows) * d);
    }
}

TEST_CASE("lesson13: a descriptor's fields round-trip") {
  require_started();
  const uint64_t d = lesson13::make_desc(0x1A3C0, 16, 1024);
  const lesson13::DescFields f = lesson13::desc_fields(d);
  CHECK(f.start == 0x1A3C0u);
  CHECK(f.lbo == 16u);
  CHECK(f.sbo == 1024u);
  CHECK(f.swizzle == 1u);
}

TEST_CASE("lesson13: the K-major descriptors read Q and K where TMA put them, every k16 step") {
  require_started();
  const uint32_t base = 3 * 1024 * 16;  // any 1024-byte-aligned address
  for (int rows : {64, 128})
    for (int d : {64, 128})
      for (int kk = 0; kk < d / 16; ++kk) {
        const uint64_t desc = lesson13::kmajor_desc(base, rows, kk);
        int wrong = 0;
        for (int mn = 0; mn < rows; ++mn)
          for (int k = 0; k < 16; ++k)
            wrong += lesson13::kmajor_read(desc, mn, k) != base + lesson13::tile_offset(rows, mn, 16 * kk + k);
        INFO("rows ", rows, " d ", d, " kk ", kk);
        CHECK(wrong == 0);
      }
}

TEST_CASE("lesson13: the MN-major descriptors read V (transposed) where TMA put it, every k16 step") {
  require_started();
  const uint32_t base = 5 * 1024 * 16;
  for (int keys : {64, 128})
    for (int d : {64, 128})
      for (int kk = 0; kk < keys / 16; ++kk) {
        const uint64_t desc = lesson13::mnmajor_desc(base, keys, kk);
        int wrong = 0;
        for (int k = 0; k < 16; ++k)
          for (int n = 0; n < d; ++n)
            wrong += lesson13::mnmajor_read(desc, k, n) != base + lesson13::tile_offset(keys, 16 * kk + k, n);
        INFO("keys ", keys, " d ", d, " kk ", kk);
        CHECK(wrong == 0);
      }
}

TEST_CASE("lesson13: the wgmma accumulator covers its 64 x N tile once") {
  require_started();
  for (int n : {64, 128}) {
    std::set<std::pair<int, int>> seen;
    for (int tid = 0; tid < 128; ++tid)
      for (int i = 0; i < n / 2; ++i) {
        const lesson13::RowCol rc = lesson13::acc_element(tid, i);
        CHECK((rc.row >= 0 && rc.row < 64 && rc.col >= 0 && rc.col < n));
        seen.insert({rc.row, rc.col});
      }
    CHECK(seen.size() == size_t(64) * n);
  }
}

TEST_CASE("lesson13: P's accumulator floats 8 kk .. 8 kk + 7 are O's A operand of step kk") {
  require_started();
  for (int tid = 0; tid < 128; ++tid)
    for (int kk = 0; kk < 8; ++kk)
      for (int r = 0; r < 4; ++r)
        for (int h = 0; h < 2; ++h) {
          const lesson13::RowCol a = lesson13::a_element(tid, r, h), c = lesson13::acc_element(tid, 8 * kk + 2 * r + h);
          CHECK(a.row == c.row);
          CHECK(a.col + 16 * kk == c.col);
        }
}
