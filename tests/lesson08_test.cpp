// Lesson 08's CPU tests: the swizzle and the tile configurations of tiles.hpp, without a GPU.
// Shared memory has 32 banks of 4 bytes; a 16-byte chunk at byte offset x covers banks
// 4 ((x / 16) % 8) .. + 3, so a set of chunk accesses is conflict-free when their (x / 16) % 8
// ("bank groups") are all different, 8 at a time (one 128-byte wavefront).
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "fa/params.hpp"
#include "tiles.hpp"
#include "check.hpp"

namespace {

void require_started() { fa::test::require_started("08_pipelining", lesson08::kTilesTodosLeft); }

int bank_group(int element_offset) { return (element_offset * 2 / 16) % 8; }

}  // namespace

TEST_CASE("lesson08: the swizzle permutes the chunks of each row") {
  require_started();
  for (int D : {64, 128})
    for (int row = 0; row < 256; ++row) {
      std::set<int> chunks;
      for (int c = 0; c < D / 8; ++c) chunks.insert(lesson08::swizzle_chunk(row, c));
      CHECK_MESSAGE((chunks.size() == size_t(D / 8) && *chunks.begin() == 0 && *chunks.rbegin() == D / 8 - 1),
                    "D = ", D, ", row ", row, ": the swizzled chunks are not a permutation of 0 .. ", D / 8 - 1);
    }
}

TEST_CASE("lesson08: ldmatrix reads of a swizzled tile are conflict-free") {
  require_started();
  // One ldmatrix phase: 8 consecutive rows (starting at a multiple of 8, as in the kernel), the
  // same 16-byte column chunk. Unswizzled they share one bank group: an 8-way conflict.
  for (int D : {64, 128})
    for (int row0 = 0; row0 < 128; row0 += 8)
      for (int c = 0; c < D / 8; ++c) {
        std::set<int> swizzled, plain;
        for (int r = row0; r < row0 + 8; ++r) {
          swizzled.insert(bank_group(lesson08::tile_offset(r, 8 * c, D)));
          plain.insert(bank_group(r * D + 8 * c));
        }
        CHECK_MESSAGE(swizzled.size() == 8, "D = ", D, ", rows ", row0, "..", row0 + 7, ", chunk ", c, ": ",
                      8 - swizzled.size() + 1, "-way bank conflict");
        CHECK(plain.size() == 1);  // what the swizzle removes
      }
}

TEST_CASE("lesson08: cp.async writes of a swizzled tile are conflict-free") {
  require_started();
  // A warp copies 32 chunks: thread x takes chunk x % (D / 8) of row x / (D / 8) (kernel.cu's
  // load_tile). Each group of 8 threads (a 128-byte wavefront) must hit 8 different bank groups.
  for (int D : {64, 128})
    for (int warp = 0; warp < 8; ++warp)
      for (int group = 0; group < 4; ++group) {
        std::set<int> banks;
        for (int x = 32 * warp + 8 * group; x < 32 * warp + 8 * group + 8; ++x)
          banks.insert(bank_group(lesson08::tile_offset(x / (D / 8), 8 * (x % (D / 8)), D)));
        CHECK_MESSAGE(banks.size() == 8, "D = ", D, ", warp ", warp, ", threads ", 8 * group, "..", 8 * group + 7,
                      ": a bank conflict on the cp.async write");
      }
}

TEST_CASE("lesson08: the kernel's address steps equal tile_offset") {
  require_started();
  // kernel.cu computes each ldmatrix address as tile_offset(r, c) ^ 16 k + 16 i D for lane
  // patterns r < 16 (with r % 8 = lane % 8) and c in {0, 8}; that must be tile_offset(r + 16 i, c + 16 k).
  for (int D : {64, 128})
    for (int r = 0; r < 16; ++r)
      for (int c : {0, 8})
        for (int k = 0; k < D / 16; ++k)
          for (int i = 0; i < 8; ++i) {
            const int fast = (lesson08::tile_offset(r, c, D) ^ (16 * k)) + 16 * i * D;
            CHECK_MESSAGE(fast == lesson08::tile_offset(r + 16 * i, c + 16 * k, D), "D = ", D, ", row ", r, ", col ", c,
                          ", step k = ", k, ", i = ", i);
          }
}

TEST_CASE("lesson08: every configuration is well formed and each architecture's fits its shared memory") {
  require_started();
  for (int i = 0; i < lesson08::kNumConfigs; ++i) {
    const lesson08::Config& c = lesson08::kConfigs[i];
    CHECK_MESSAGE(lesson08::well_formed(c), "configuration ", i, " is not well formed");
    std::string fits;
    for (const lesson08::Arch& a : lesson08::kArchs)
      if (lesson08::smem_bytes(c) <= a.smem_per_block) fits += " sm_" + std::to_string(a.sm);
    MESSAGE("configuration ", i, ": d ", c.head_dim, ", ", c.rows, " x ", c.keys, ", ", c.warps, " warps, ", c.stages,
            " stages: ", lesson08::smem_bytes(c) / 1024, " KB, fits", fits);
  }
  for (const lesson08::Arch& a : lesson08::kArchs)
    for (int d : {64, 128}) {
      const int i = lesson08::config_for(a.sm, d);
      REQUIRE_MESSAGE((i >= 0 && i < lesson08::kNumConfigs), "sm_", a.sm, " has no configuration for head_dim ", d);
      const lesson08::Config& c = lesson08::kConfigs[i];
      CHECK_MESSAGE(c.head_dim == d, "sm_", a.sm, ", head_dim ", d, ": configuration ", i, " is for head_dim ", c.head_dim);
      CHECK_MESSAGE(lesson08::smem_bytes(c) <= a.smem_per_block, "sm_", a.sm, ", head_dim ", d, ": configuration ", i,
                    " needs ", lesson08::smem_bytes(c), " bytes of shared memory, the limit is ", a.smem_per_block);
    }
}
