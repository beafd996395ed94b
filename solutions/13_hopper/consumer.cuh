// Lesson 13's consumer warpgroups: each owns 64 query rows of every work tile, runs S = Q K^T, the
// masked online softmax and O += P V over its key tiles on wgmma, in the order the schedule's step
// says, and writes O and the LSE.
#pragma once

#include "fa/device.cuh"
#include "fa/hopper.cuh"
#include "fa/mma.cuh"
#include "fa/wgmma.cuh"
#include "pipeline.hpp"
#include "trace.hpp"
#include "wgmma.hpp"

namespace lesson13 {

// This file's TODOs you have not written yet: delete an entry when its code is written.
inline const fa::TodoList kConsumerTodosLeft = {
    // @todos-left
};

// Consumer warpgroup wg (1 .. kConsumers) of the block. mark(phase, key) records the trace (trace.hpp).
template <class T, int D, int kStep, int kConsumers, class Mark>
__device__ __forceinline__ void consume(const Block& x, int wg, int tid, Mark& mark) {
  constexpr int kStages = stages_of(kStep, D);
  constexpr int kRows = rows_of(kConsumers);
  using S = Smem<D, kStages, kRows>;
  namespace ph = phase;
  using fa::mbar_arrive;
  using fa::mbar_wait;
  using fa::named_arrive;
  using fa::named_sync;
  const fa::AttnParams& p = x.p;
  const uint32_t q_addr = x.q_addr, k_addr = x.k_addr, v_addr = x.v_addr, q_full = x.q_full, full = x.full, empty = x.empty;
  volatile int64_t* work_slot = x.work_slot;
  const int64_t n_work = x.n_work;
  const int offset = p.seqlen_k - p.seqlen_q;
  // ---- Consumers: warpgroup wg owns rows 64 (wg - 1) .. 64 wg - 1 of each work tile. What the
  // producer gives away (producer.cuh) they take: 40 x 128 + 232 x 256 registers with two consumer
  // warpgroups, 32 x 128 + 160 x 384 with three, at most the SM's 64 K either way.
  fa::set_max_registers_inc<kConsumers == 3 ? 160 : 232>();
  const int row_base = 64 * (wg - 1);
  const int w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float sl2 = p.scale * fa::kLog2e;
  float o[D / 2], sacc[kKeys / 2];
  float m[2], l[2];
  uint32_t pa[kKeys / 16][4];  // P of the last softmaxed tile, packed: O's A operand
  const uint32_t q_rows = q_addr + row_base * 128;  // this warpgroup's 64 rows of every column block
  Tile tl{};
  // K/V tiles consumed so far, counted as the producer counts them, modulo 2 kStages: a ring
  // slot's stage (r % kStages) and phase parity ((r / kStages) & 1) repeat with that period.
  int kv = 0;

  // S = Q K^T for the key tile of ring position r: D / 16 steps of k16 into sacc (64 x kKeys, fp32),
  // issued and committed, not waited.
  auto issue_s = [&](int r) {
    const uint32_t kj = k_addr + Ring<kStages>::stage(r) * S::kv_bytes;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      fa::wgmma_ss<T, kKeys>(sacc, lesson13::kmajor_desc(q_rows, kRows, kk), lesson13::kmajor_desc(kj, kKeys, kk), kk > 0);
    fa::wgmma_commit();
  };
  // O += P V: P's floats 8 kk .. 8 kk + 7 are the A registers of step kk (wgmma.hpp, a_element).
  auto issue_pv = [&](int r) {
    const uint32_t vj = v_addr + Ring<kStages>::stage(r) * S::kv_bytes;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) fa::wgmma_rs<T, D>(o, pa[kk], lesson13::mnmajor_desc(vj, kKeys, kk), 1);
    fa::wgmma_commit();
  };
  auto wait_full = [&](int r) { mbar_wait(full + 8 * Ring<kStages>::stage(r), Ring<kStages>::parity(r)); };
  // This warp is done with ring position r (its wgmmas on it have completed): one of the 4 kConsumers arrivals.
  auto release = [&](int r) {
    if (lane == 0) mbar_arrive(empty + 8 * Ring<kStages>::stage(r));
  };
  // The mask and the online softmax (lessons 04-06, base 2) of key tile j, in place: sacc becomes
  // P (unnormalised, fp32), m and l move on, and alpha[hh] is what O's row hh must be scaled by.
  auto softmax = [&](int j, float (&alpha)[2]) {
    // The mask, on the tiles that need it: key col is visible from row i iff col < seqlen_k and
    // (causal) col <= i + offset.
    if (j >= tl.n_full) {
      // TODO(6): -inf where key col is not visible from row i (lesson13::acc_element gives both).
      // BEGIN SOLUTION
#pragma unroll
      for (int i = 0; i < kKeys / 2; ++i) {
        const lesson13::RowCol rc = lesson13::acc_element(tid, i);
        const int row = tl.q0 + row_base + rc.row, col = j * kKeys + rc.col;
        if (col >= p.seqlen_k || (p.causal && col > row + offset)) sacc[i] = fa::kNegInf;
      }
      // END SOLUTION
    }
    // Each thread holds 2 rows (hh = 0: g, 1: g + 8).
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = m[hh];
#pragma unroll
      for (int i = 0; i < kKeys / 2; ++i)
        if ((i / 2) % 2 == hh) mx = fmaxf(mx, sacc[i]);
      mx = fa::group_max<4>(mx);
      const float m_scaled = mx == fa::kNegInf ? 0.f : mx * sl2;
      alpha[hh] = fa::ex2(m[hh] * sl2 - m_scaled);
      m[hh] = mx;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < kKeys / 2; ++i)
        if ((i / 2) % 2 == hh) {
          sacc[i] = fa::ex2(fmaf(sacc[i], sl2, -m_scaled));
          sum += sacc[i];
        }
      l[hh] = l[hh] * alpha[hh] + sum;
    }
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i / 2) % 2];
  };
  // P, packed to 16 bits: registers an in-flight wgmma reads must not change, so this happens only
  // when no P V is in flight.
  auto pack_p = [&] {
    // TODO(7): pa[kk][r] = P's floats 8 kk + 2 r and 8 kk + 2 r + 1, packed (fa::pack2<T>).
    // BEGIN SOLUTION
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = fa::pack2<T>(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
    // END SOLUTION
    // BEGIN SKELETON
    // for (auto& a : pa) a[0] = a[1] = a[2] = a[3] = 0;
    // END SKELETON
  };
  // Ping-pong (steps 3-4): warpgroup wg waits on its named barrier turn(wg) and, once its GEMMs are
  // issued, passes the turn on (arrive) to the next, the last to warpgroup 1: with two, each to the
  // other. 256 = its own 128 threads + the passing warpgroup's 128.
  const int my_turn = turn(wg), their_turn = next_turn<kConsumers>(wg);
  auto take_turn = [&] {
    if constexpr (kStep >= 3) named_sync(my_turn, kTurnThreads);
  };
  auto pass_turn = [&] {
    if constexpr (kStep >= 3) named_arrive(their_turn, kTurnThreads);
  };
  // Warpgroup 1 takes a tile's first turn. The last warpgroup hands it over either at the tile's
  // start or, on the persistent grid, at the end of the tile before (handed): its last P V issued,
  // warpgroup 1 may start the next tile's Q K^T while the last waits for that P V and writes its O.
  bool handed = false;

  mark(ph::kRendezvous, 0);
  named_sync(rendezvous(wg), kRendezvousThreads);
  int64_t work = work_slot[0];
  for (int iter = 0; work < n_work; ++iter) {
    tl = tile_of<kRows>(p, work);
    mark(ph::kWaitQ, work);
    mbar_wait(q_full, iter & 1);  // Q is in
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    m[0] = m[1] = fa::kNegInf;
    l[0] = l[1] = 0.f;
    const int n = tl.n_tiles;
    if (n > 0) {
      if constexpr (kStep >= 3)
        if (wg == kConsumers && !handed) named_arrive(their_turn, kTurnThreads);  // warpgroup 1 goes first
      float alpha[2];
      if constexpr (kStep == 1) {
        for (int j = 0; j < n; ++j) {
          mark(ph::kWaitKV, j);
          wait_full(kv + j);
          mark(ph::kIssue, j);
          fa::wgmma_fence();
          issue_s(kv + j);
          mark(ph::kWaitS, j);
          fa::wgmma_wait<0>();
          mark(ph::kSoftmax, j);
          softmax(j, alpha);
          mark(ph::kRescale, j);
          rescale_o(alpha);
          pack_p();
          mark(ph::kIssue, j);
          fa::wgmma_fence();
          issue_pv(kv + j);
          mark(ph::kWaitPV, j);
          fa::wgmma_wait<0>();
          release(kv + j);
        }
      } else {
        // Key tile 0: S, then its softmax; its P V waits for the next phase.
        mark(ph::kWaitKV, 0);
        wait_full(kv);
        mark(ph::kWaitTurn, 0);
        take_turn();
        mark(ph::kIssue, 0);
        fa::wgmma_fence();
        issue_s(kv);
        pass_turn();
        mark(ph::kWaitS, 0);
        fa::wgmma_wait<0>();
        mark(ph::kSoftmax, 0);
        softmax(0, alpha);  // O is still 0: nothing to rescale
        pack_p();
        for (int j = 1; j < n; ++j) {
          mark(ph::kWaitKV, j);
          wait_full(kv + j);
          mark(ph::kWaitTurn, j);
          take_turn();
          mark(ph::kIssue, j);
          fa::wgmma_fence();
          issue_s(kv + j);       // S_j = Q K_j^T
          issue_pv(kv + j - 1);  // O += P_{j-1} V_{j-1}, with P_{j-1} from registers
          pass_turn();
          mark(ph::kWaitS, j);
          fa::wgmma_wait<1>();  // S_j is done; P V may still run
          mark(ph::kSoftmax, j);
          softmax(j, alpha);          // ... under it: this is the overlap
          mark(ph::kWaitPV, j - 1);
          fa::wgmma_wait<0>();  // P V done: O may change, stage of j - 1 is free
          mark(ph::kRescale, j);
          release(kv + j - 1);
          rescale_o(alpha);
          pack_p();
        }
      }
    }
    // Every Q K^T of this work tile is done: meet the producer (Q's buffer may take the next
    // tile's rows) and learn the next tile.
    mark(ph::kRendezvous, 0);
    named_sync(rendezvous(wg), kRendezvousThreads);
    const int64_t next = work_slot[(iter + 1) & 1];
    if constexpr (kStep >= 2) {
      if (n > 0) {
        mark(ph::kWaitTurn, n - 1);
        take_turn();
        mark(ph::kIssue, n - 1);
        fa::wgmma_fence();
        issue_pv(kv + n - 1);
        // Each warpgroup but the last passes the turn on to the next one's last P V; the last hands
        // warpgroup 1 the next tile's first turn, if that tile has one (a turn passed must be taken: a named
        // barrier counts arrivals, and a second pass would complete it alone).
        const bool hand = wg == kConsumers && next < n_work && tile_of<kRows>(p, next).n_tiles > 0;
        if (wg != kConsumers || hand) pass_turn();
        handed = hand;
        mark(ph::kWaitPV, n - 1);
        fa::wgmma_wait<0>();
        release(kv + n - 1);
      }
    }
    kv = (kv + n) % (2 * kStages);

    // O / l and the LSE (natural log), O = 0 and LSE = +inf for rows that see no key.
    mark(ph::kEpilogue, 0);
    T* obase = static_cast<T*>(p.o) + tl.b * p.o_stride.batch + tl.h * p.o_stride.head;
    const int64_t bh = int64_t(tl.b) * p.heads_q + tl.h;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = fa::group_sum<4>(l[hh]);
      const int row = tl.q0 + row_base + 16 * w + g + 8 * hh;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* orow = obase + int64_t(row) * p.o_stride.row;
      // Thread t holds columns 8 kb + 2 t and + 1 of each 8-column block kb of its row (floats
      // 4 kb + 2 hh, + 1; acc_element). Stored so, a warp's store writes 16 bytes in each of 8 rows.
      // Instead, for each four blocks 4 c .. 4 c + 3 the quad's four threads transpose their
      // packed pairs (two rounds of shuffles), which leaves thread t the 8 columns of block
      // 4 c + t: one 16-byte store, and a warp's store 64 contiguous bytes in each of 8 rows, four
      // times fewer store instructions and cache lines written. (Every lane shuffles, in-range row or not.)
#pragma unroll
      for (int c = 0; c < D / 32; ++c) {
        uint32_t u[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int i = 4 * (4 * c + k) + 2 * hh;
          u[k] = fa::pack2<T>(o[i] * inv, o[i + 1] * inv);
        }
        // Round `bit` (1, then 2): threads t and t ^ bit swap the positions k whose bit differs
        // from t's (each keeps the one whose bit matches).
#pragma unroll
        for (int bit = 1; bit <= 2; bit *= 2)
#pragma unroll
          for (int k = 0; k < 4; ++k)
            if ((k & bit) == 0) {
              const bool hi = (t & bit) != 0;
              const uint32_t got = __shfl_xor_sync(0xffffffffu, hi ? u[k] : u[k | bit], bit);
              if (hi) u[k] = got;
              else u[k | bit] = got;
            }
        if (row >= 0 && row < p.seqlen_q) *reinterpret_cast<uint4*>(orow + 8 * (4 * c + t)) = make_uint4(u[0], u[1], u[2], u[3]);
      }
      if (t == 0 && row >= 0 && row < p.seqlen_q)
        p.lse[bh * p.seqlen_q + row] = sum > 0.f ? (m[hh] * sl2 + log2f(sum)) / fa::kLog2e : INFINITY;
    }
    work = next;
  }
}

}  // namespace lesson13
