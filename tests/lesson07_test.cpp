// Lesson 07's CPU tests: the fragment layouts of fragments.hpp, without a GPU. Three kinds of check:
//   1. each layout against the PTX ISA's own description (written out here a second time, in the
//      ISA's words: "groupID", "threadID_in_group");
//   2. each layout covers its tile exactly once (32 lanes x registers = every element once);
//   3. ldmatrix, simulated by the ISA's rule, delivers from the addresses of ldmatrix_a/_b/_b_trans
//      exactly the registers mma_a/mma_b want: the address functions and the layouts agree.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>

#include "fa/params.hpp"
#include "fragments.hpp"

namespace {

using lesson07::RowCol;

void require_started() {
  try {
    fa::throw_if_todos_left("07_tensor_cores", lesson07::kFragmentsTodosLeft);
  } catch (const fa::NotImplemented& e) {
    FAIL(std::string(e.what()));
  }
}

std::string at(int lane, int r, int h) {
  return "lane " + std::to_string(lane) + ", register " + std::to_string(r) + ", value " + std::to_string(h);
}

// The PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": for A, "row =
// groupID for a0, a1, a4, a5 and groupID + 8 otherwise; col = threadID_in_group * 2 + (i & 1)
// for a0..a3 and + 8 for a4..a7", where a_i is the i-th 16-bit value (two per register).
RowCol isa_a(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
  const int col = (i < 4) ? tig * 2 + (i & 1) : tig * 2 + (i & 1) + 8;
  return {row, col};
}
// B: "row = threadID_in_group * 2 + (i & 1) for b0, b1 and + 8 for b2, b3; col = groupID".
RowCol isa_b(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  return {tig * 2 + (i & 1) + (i >= 2 ? 8 : 0), group};
}
// C/D: "row = groupID for c0, c1 and groupID + 8 for c2, c3; col = threadID_in_group * 2 + (i & 1)".
RowCol isa_c(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  return {i < 2 ? group : group + 8, tig * 2 + (i & 1)};
}

bool same(RowCol a, RowCol b) { return a.row == b.row && a.col == b.col; }

}  // namespace

TEST_CASE("lesson07: mma fragment layouts match the PTX ISA") {
  require_started();
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h)
        CHECK_MESSAGE(same(lesson07::mma_a(lane, r, h), isa_a(lane, 2 * r + h)), "mma_a at ", at(lane, r, h));
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h)
        CHECK_MESSAGE(same(lesson07::mma_b(lane, r, h), isa_b(lane, 2 * r + h)), "mma_b at ", at(lane, r, h));
    for (int i = 0; i < 4; ++i)
      CHECK_MESSAGE(same(lesson07::mma_c(lane, i), isa_c(lane, i)), "mma_c at lane ", lane, ", float ", i);
  }
}

TEST_CASE("lesson07: every fragment covers its tile exactly once") {
  require_started();
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) a.insert({lesson07::mma_a(lane, r, h).row, lesson07::mma_a(lane, r, h).col});
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) b.insert({lesson07::mma_b(lane, r, h).row, lesson07::mma_b(lane, r, h).col});
    for (int i = 0; i < 4; ++i) c.insert({lesson07::mma_c(lane, i).row, lesson07::mma_c(lane, i).col});
  }
  auto inside = [](const std::set<std::pair<int, int>>& s, int rows, int cols) {
    for (auto [r, col] : s)
      if (r < 0 || r >= rows || col < 0 || col >= cols) return false;
    return true;
  };
  CHECK_MESSAGE((a.size() == 256 && inside(a, 16, 16)), "A: 32 lanes x 8 values must be the 256 elements of 16 x 16");
  CHECK_MESSAGE((b.size() == 128 && inside(b, 16, 8)), "B: 32 lanes x 4 values must be the 128 elements of 16 x 8");
  CHECK_MESSAGE((c.size() == 128 && inside(c, 16, 8)), "C: 32 lanes x 4 floats must be the 128 elements of 16 x 8");
}

TEST_CASE("lesson07: the accumulator of two n8 tiles is the A fragment of P") {
  require_started();
  // O += P V reuses S's registers: A register 0 = tile 0 floats 0, 1; 1 = tile 0 floats 2, 3;
  // 2 = tile 1 floats 0, 1; 3 = tile 1 floats 2, 3 (tile 1 is columns 8-15).
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        const int tile = r / 2, f = 2 * (r % 2) + h;
        RowCol acc = lesson07::mma_c(lane, f);
        acc.col += 8 * tile;
        CHECK_MESSAGE(same(acc, lesson07::mma_a(lane, r, h)), "P reuse at ", at(lane, r, h));
      }
}

namespace {

// ldmatrix.x4 by the ISA's rule: lane l supplies the address of row l % 8 of matrix l / 8; then
// register r of lane l holds matrix r's row l / 4, columns 2 (l % 4) and + 1 (with .trans: rows
// 2 (l % 4) and + 1, column l / 4). `origin(l)` is the tile element lane l's address points at.
// Returns, for (lane, register, value), the tile element that arrives there.
template <class Origin>
RowCol ldmatrix(Origin origin, bool trans, int lane, int r, int h) {
  const RowCol row_start = origin(8 * r + (trans ? 2 * (lane % 4) + h : lane / 4));
  return {row_start.row, row_start.col + (trans ? lane / 4 : 2 * (lane % 4) + h)};
}

}  // namespace

TEST_CASE("lesson07: ldmatrix from ldmatrix_a, _b, _b_trans delivers the mma fragments") {
  require_started();
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        // A (Q rows x dims): register r must be A register r.
        const RowCol got_a = ldmatrix(lesson07::ldmatrix_a, false, lane, r, h);
        CHECK_MESSAGE(same(got_a, lesson07::mma_a(lane, r, h)), "ldmatrix_a at ", at(lane, r, h));
        // K stored [key][dim]: register r is B register r % 2 of n8 tile r / 2; B(k, n) = K(n, k).
        const RowCol b = lesson07::mma_b(lane, r % 2, h);
        const RowCol want_k = {8 * (r / 2) + b.col, b.row};
        CHECK_MESSAGE(same(ldmatrix(lesson07::ldmatrix_b, false, lane, r, h), want_k), "ldmatrix_b at ", at(lane, r, h));
        // V stored [key][dim], .trans: register r is B register r % 2 of the n8 tile of dims
        // 8 (r / 2) ..; B(k, n) = V(k, n).
        const RowCol want_v = {b.row, 8 * (r / 2) + b.col};
        CHECK_MESSAGE(same(ldmatrix(lesson07::ldmatrix_b_trans, true, lane, r, h), want_v),
                      "ldmatrix_b_trans at ", at(lane, r, h));
      }
}
