// Lesson 10's CPU tests: the tile walks of backward.hpp against brute force over the causal mask,
// and the README's worked example of the backward (seqlen 2, head_dim 2) through the CPU model,
// against the numbers printed in the README and the fp64 reference. Without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backward.hpp"
#include "fa/half.hpp"
#include "fa/params.hpp"
#include "reference.hpp"
#include "check.hpp"

const fa::LessonInfo& fa_lesson_10_model();

namespace {

void require_started() { fa::test::require_started("10_backward", lesson10::kTilesTodosLeft); }

// Does the (query tile, key tile) pair hold at least one visible (i, j)? Straight from the mask.
bool tile_pair_visible(int qt, int rows, int kt, int keys, int sq, int sk, bool causal) {
  for (int i = qt * rows; i < std::min((qt + 1) * rows, sq); ++i)
    for (int j = kt * keys; j < std::min((kt + 1) * keys, sk); ++j)
      if (!causal || lesson10::visible(i, j, sq, sk)) return true;
  return false;
}

const int kLengths[] = {1, 2, 5, 31, 32, 33, 64, 100, 129};
const int kTiles[] = {1, 16, 32, 64};

}  // namespace

TEST_CASE("lesson10: the first query tile a key tile visits") {
  require_started();
  // The dK/dV walk of key tile kt starts at first_query_tile: every earlier query tile holds no
  // visible pair with it (skipping them loses nothing), and that tile holds one (it skips all it may).
  for (int sq : kLengths)
    for (int sk : kLengths)
      for (int rows : kTiles)
        for (int keys : kTiles)
          for (bool causal : {false, true})
            for (int kt = 0; kt < lesson10::tile_count(sk, keys); ++kt) {
              const int q_tiles = lesson10::tile_count(sq, rows);
              int want = q_tiles;  // no query tile sees this key tile
              for (int qt = 0; qt < q_tiles; ++qt)
                if (tile_pair_visible(qt, rows, kt, keys, sq, sk, causal)) {
                  want = qt;
                  break;
                }
              const int got = lesson10::first_query_tile(kt * keys, rows, sq, sk, causal);
              CHECK_MESSAGE(got == want, (causal ? "causal" : "non-causal"), " seqlen_q ", sq, ", seqlen_k ", sk, ", ",
                            rows, " rows per query tile, key tile ", kt, " of ", keys, " keys: got ", got,
                            ", the first query tile that sees it is ", want);
            }
}

TEST_CASE("lesson10: the last key tile a query tile visits") {
  require_started();
  // The dQ walk of query tile qt stops at key_tile_end: one past the last key tile holding a
  // visible pair with it (0 when there is none), so no later tile is needed and none is missed.
  for (int sq : kLengths)
    for (int sk : kLengths)
      for (int rows : kTiles)
        for (int keys : kTiles)
          for (bool causal : {false, true})
            for (int qt = 0; qt < lesson10::tile_count(sq, rows); ++qt) {
              int want = 0;
              for (int kt = 0; kt < lesson10::tile_count(sk, keys); ++kt)
                if (tile_pair_visible(qt, rows, kt, keys, sq, sk, causal)) want = kt + 1;
              const int got = lesson10::key_tile_end(qt * rows, rows, keys, sq, sk, causal);
              CHECK_MESSAGE(got == want, (causal ? "causal" : "non-causal"), " seqlen_q ", sq, ", seqlen_k ", sk,
                            ", query tile ", qt, " of ", rows, " rows, ", keys, " keys per tile: got ", got,
                            ", one past the last key tile it sees is ", want);
            }
}

TEST_CASE("lesson10: the README worked example through the CPU model") {
  require_started();
  // README, "A worked example": seqlen 2, head_dim 2, scale 1/sqrt(2), non-causal,
  //   Q = [1 0; 1 1], K = [1 0; 0 1], V = [1 2; 3 -1], dO = [1 0; 0 1].
  // Every input is exact in fp16. O and the LSE are the forward's (fp64, O rounded to fp16, the
  // LSE to fp32), as the backward suite makes them.
  fa::Problem prob;
  prob.seqlen_q = prob.seqlen_k = prob.head_dim = 2;
  fa::ref::Inputs in;
  in.q = {1, 0, 1, 1};
  in.k = {1, 0, 0, 1};
  in.v = {1, 2, 3, -1};
  const std::vector<double> dout = {1, 0, 0, 1};
  const fa::ref::Forward fwd = fa::ref::forward(prob, in);
  const fa::ref::Gradients want = fa::ref::backward(prob, in, dout);

  auto bits = [](const std::vector<double>& x) {
    std::vector<uint16_t> b;
    for (double v : x) b.push_back(fa::to_storage(fa::DType::kF16, v));
    return b;
  };
  std::vector<uint16_t> q = bits(in.q), k = bits(in.k), v = bits(in.v), o = bits(fwd.o), dO = bits(dout);
  std::vector<float> lse(fwd.lse.begin(), fwd.lse.end());
  std::vector<uint16_t> dq(4, 0x7e00), dk(4, 0x7e00), dv(4, 0x7e00);  // NaN until written
  fa::AttnParams p;
  p.batch = p.heads_q = p.heads_kv = 1;
  p.seqlen_q = p.seqlen_k = p.head_dim = 2;
  p.dtype = fa::DType::kF16;
  p.scale = static_cast<float>(fa::default_scale(2));
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  p.lse = lse.data();
  p.dout = dO.data();
  p.dq = dq.data();
  p.dk = dk.data();
  p.dv = dv.data();
  fa::set_contiguous_strides(p);
  try {
    fa::run_backward(fa_lesson_10_model(), p);
  } catch (const fa::NotImplemented& e) {
    FAIL(std::string(e.what()));
  }

  // The README's numbers, to 4 decimals. The model's results are rounded to fp16 (half an ulp is
  // 2^-12 = 0.00024 in [0.5, 1)) and use the rounded O (D_0 moves by ~2e-4): 1e-3 covers both.
  const double readme_dq[4] = {-0.3128, 0.3128, 0.5303, -0.5303};
  const double readme_dk[4] = {0.2175, 0.5303, -0.2175, -0.5303};
  const double readme_dv[4] = {0.6698, 0.5000, 0.3302, 0.5000};
  const char* names[3] = {"dQ", "dK", "dV"};
  const std::vector<uint16_t>* got[3] = {&dq, &dk, &dv};
  const double* readme[3] = {readme_dq, readme_dk, readme_dv};
  const std::vector<double>* ref[3] = {&want.dq, &want.dk, &want.dv};
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < 4; ++e) {
      const double g = fa::from_storage(fa::DType::kF16, (*got[t])[e]);
      CHECK_MESSAGE(std::fabs(g - readme[t][e]) < 1e-3, names[t], "[", e / 2, "][", e % 2, "] = ", g,
                    ", the README says ", readme[t][e]);
      CHECK_MESSAGE(std::fabs((*ref[t])[e] - readme[t][e]) < 1e-4, names[t], "[", e / 2, "][", e % 2,
                    "]: the fp64 reference says ", (*ref[t])[e], ", the README ", readme[t][e]);
    }
}
