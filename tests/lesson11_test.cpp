// Lesson 11's CPU tests: the index math of tiles.hpp (which query tiles a key tile visits and
// which need the mask, where a lane's values of S^T sit, the transposed ldmatrix that turns the
// stored dS^T into dQ's A operand) and the configurations' shared-memory budgets, without a GPU.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>

#include "../07_tensor_cores/fragments.hpp"
#include "../08_pipelining/tiles.hpp"  // kArchs: each GPU's shared memory per block
#include "tiles.hpp"
#include "check.hpp"

namespace {

void require_started() { fa::test::require_started("11_fast_backward", lesson11::kTilesTodosLeft); }

bool visible(int i, int j, int offset) { return j <= i + offset; }

}  // namespace

TEST_CASE("lesson11: first_query_tile skips exactly the query tiles that see none of the key tile") {
  require_started();
  for (int rows : {64, 128})
    for (int keys : {64, 128})
      for (auto [sq, sk] : {std::pair{300, 300}, std::pair{100, 300}, std::pair{300, 100}, std::pair{1, 1000}, std::pair{1000, 1}})
        for (int k0 = 0; k0 < sk; k0 += keys) {
          const int offset = sk - sq, n_qtiles = (sq + rows - 1) / rows;
          const int first = lesson11::first_query_tile(k0, offset, rows, true);
          CHECK(lesson11::first_query_tile(k0, offset, rows, false) == 0);
          auto sees = [&](int qt) {  // does query tile qt see any key of the key tile?
            for (int i = qt * rows; i < std::min(sq, (qt + 1) * rows); ++i)
              for (int j = k0; j < std::min(sk, k0 + keys); ++j)
                if (visible(i, j, offset)) return true;
            return false;
          };
          INFO("rows ", rows, " keys ", keys, " seqlen_q ", sq, " seqlen_k ", sk, " k0 ", k0, " first ", first);
          for (int qt = 0; qt < std::min(first, n_qtiles); ++qt) CHECK_FALSE(sees(qt));
          if (first < n_qtiles) CHECK(sees(first));
          for (int qt = first + 1; qt < n_qtiles; ++qt) CHECK(sees(qt));  // visibility only grows down the rows
        }
}

TEST_CASE("lesson11: needs_mask is false only where every pair is visible and every key exists") {
  require_started();
  for (bool causal : {false, true})
    for (int rows : {64, 128})
      for (int keys : {64, 128})
        for (auto [sq, sk] : {std::pair{300, 300}, std::pair{100, 300}, std::pair{300, 100}, std::pair{130, 129}})
          for (int q0 = 0; q0 < sq; q0 += rows)
            for (int k0 = 0; k0 < sk; k0 += keys) {
              const int offset = sk - sq;
              bool all = k0 + keys <= sk;
              for (int i = q0; i < q0 + rows && all; ++i)
                for (int j = k0; j < k0 + keys && all; ++j) all = !causal || visible(i, j, offset);
              INFO("causal ", causal, " rows ", rows, " keys ", keys, " q0 ", q0, " k0 ", k0);
              CHECK(lesson11::needs_mask(q0, k0, keys, sk, offset, causal) == !all);
            }
}

TEST_CASE("lesson11: st_element is the accumulator layout of S^T, each element once") {
  require_started();
  for (int sub : {32, 64}) {
    std::set<std::pair<int, int>> seen;
    for (int lane = 0; lane < 32; ++lane)
      for (int nt = 0; nt < sub / 8; ++nt)
        for (int e = 0; e < 4; ++e) {
          const lesson11::KeyRow at = lesson11::st_element(lane, nt, e);
          const lesson07::RowCol c = lesson07::mma_c(lane, e);
          CHECK(at.key == c.row);
          CHECK(at.row == nt * 8 + c.col);
          seen.insert({at.key, at.row});
        }
    CHECK(seen.size() == size_t(16 * sub));
  }
}

TEST_CASE("lesson11: ldmatrix .trans of the stored dS^T gives dQ's A fragment") {
  require_started();
  // A 16 x 16 block of dS (rows m, keys k) stored transposed: St[k][m] = id(m, k). ldmatrix.x4
  // .trans: register r of lane l holds, from matrix r (rows at the addresses of lanes 8r..8r+7),
  // stored row 2 (l % 4) + h, column l / 4. It must equal A's fragment (lesson 07's mma_a).
  auto id = [](int m, int k) { return 100 * m + k; };
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        const lesson11::RowCol src = lesson11::ldmatrix_a_trans(8 * r + 2 * (lane % 4) + h);
        const int k = src.row, m = src.col + lane / 4;  // the stored element (row k, column m)
        const lesson07::RowCol want = lesson07::mma_a(lane, r, h);
        INFO("lane ", lane, " register ", r, " half ", h);
        CHECK(id(m, k) == id(want.row, want.col));
      }
}

TEST_CASE("lesson11: every configuration is well formed and fits in shared memory") {
  require_started();
  for (int i = 0; i < lesson11::kNumConfigs; ++i) {
    const lesson11::Config& c = lesson11::kConfigs[i];
    INFO("configuration ", i);
    CHECK(lesson11::well_formed(c));
    CHECK(lesson11::smem_bytes(c) <= 227 * 1024);  // sm_90's opt-in limit per block
    CHECK(lesson11::smem_bytes(c) <= 163 * 1024);  // and sm_80's: every configuration runs on both
  }
  for (int d : {64, 128}) {
    const int i = lesson11::config_for(d);
    REQUIRE(i >= 0);
    CHECK(lesson11::kConfigs[i].head_dim == d);
  }
}

// The backward on each GPU a student may have (lesson 08's kArchs: sm_80, sm_86, sm_89, sm_90,
// sm_120): its dK/dV kernel and its dQ pass must each fit the GPU's shared memory per block.
// Where one does not, fa::allow_smem's cudaFuncSetAttribute fails and the backward throws
// fa::CudaError before the dK/dV kernel launches: the GPU refuses it, it never computes a wrong
// gradient. That happens in one place, the README's "no fallback": d = 128, whose one
// configuration needs 145 KB, on the GPUs with 99 KB (sm_86, sm_89, sm_120).
TEST_CASE("lesson11: on each GPU each head dim's backward fits its shared memory, but d = 128 on the 99 KB GPUs") {
  require_started();
  for (int i = 0; i < lesson11::kNumConfigs; ++i) {
    const lesson11::Config& c = lesson11::kConfigs[i];
    std::string fits;
    for (const lesson08::Arch& a : lesson08::kArchs)
      if (lesson11::smem_bytes(c) <= a.smem_per_block) fits += " sm_" + std::to_string(a.sm);
    MESSAGE("configuration ", i, ": d ", c.head_dim, ", ", c.keys, " keys x ", c.rows, " rows, ", c.warps, " warps: ",
            lesson11::smem_bytes(c), " bytes, fits", fits.empty() ? " none" : fits);
  }
  const auto refused = [](int sm, int d) { return d == 128 && (sm == 86 || sm == 89 || sm == 120); };
  for (const lesson08::Arch& a : lesson08::kArchs)
    for (int d : {64, 128}) {
      const int i = lesson11::config_for(d);
      REQUIRE(i >= 0);
      const int dkdv = lesson11::smem_bytes(lesson11::kConfigs[i]), dq = lesson11::dq_smem_bytes(d);
      const bool runs = dkdv <= a.smem_per_block && dq <= a.smem_per_block;
      const std::string why = runs ? "it fits, but this test lists it as refused (README: no fallback): update both"
                                   : "over the limit: fa::allow_smem throws on this GPU";
      CHECK_MESSAGE(runs != refused(a.sm, d), "sm_", a.sm, ", head_dim ", d, ": the dK/dV kernel (configuration ", i,
                    ") needs ", dkdv, " bytes of shared memory and the dQ pass ", dq, ", the limit is ",
                    a.smem_per_block, ": ", why);
    }
}
