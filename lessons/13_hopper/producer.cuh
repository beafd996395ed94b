// Your copy of this lesson, generated from solutions/13_hopper/producer.cuh by fa-skeleton.
// Lesson 13's producer warpgroup: one thread issues every copy (TMA) of the block's work tiles,
// Q and then the K/V tiles through the ring, and learns the next work tile (the scheduler).
#pragma once

#include "fa/device.cuh"
#include "fa/hopper.cuh"
#include "pipeline.hpp"
#include "trace.hpp"
#include "wgmma.hpp"

namespace lesson13 {

// This file's TODOs you have not written yet: delete an entry when its code is written.
inline const fa::TodoList kProducerTodosLeft = {
    "TODO(5) in producer.cuh: before reusing stage s (reused), wait for the consumers' release of the tile it",
};

// Warpgroup 0 of the block: warp 0 runs the loop; the other three only give their registers away.
// mark(phase, key) records the trace (trace.hpp; nothing when it is off).
template <class T, int D, int kStep, int kConsumers, class Mark>
__device__ __forceinline__ void produce(const Block& x, int tid, Mark& mark) {
  constexpr int kStages = stages_of(kStep, D);
  constexpr bool kPersistent = kStep >= 4;
  constexpr int kRows = rows_of(kConsumers);
  using S = Smem<D, kStages, kRows>;
  namespace ph = phase;
  using fa::mbar_expect_tx;
  using fa::mbar_wait_long;
  using fa::named_sync;
  using fa::tma_load;
  const fa::AttnParams& p = x.p;
  const CUtensorMap &tq = *x.tq, &tk = *x.tk, &tv = *x.tv;
  const uint32_t q_addr = x.q_addr, k_addr = x.k_addr, v_addr = x.v_addr, q_full = x.q_full, full = x.full, empty = x.empty;
  volatile int64_t* work_slot = x.work_slot;
  const int64_t n_work = x.n_work;
  unsigned long long* counter = x.counter;
  // ---- Producer: warp 0 runs the loop, its lane 0 issues every copy; the other three warps
  // only give their registers away.
  fa::set_max_registers_dec<kConsumers == 3 ? 32 : 40>();
  if (tid < 32) {
    int64_t w = Scheduler<kPersistent>::first();
    // The ring's next position, counted across work tiles modulo 2 kStages, as the consumers
    // count it: its stage is kv % kStages and its round's parity kv / kStages. (A running 64-bit
    // count would cost the producer, with its 40 registers (32 with three consumers), one more.)
    int kv = 0;
    bool reused = false;  // past the first kStages copies: the next stage held a tile before
    // What the producer keeps of a work tile: its Q rows, its (batch, head) for Q and for K/V, and
    // how many key tiles it visits.
    struct Copies {
      int q0, qz, kz, n_tiles;
    };
    auto copies_of = [&](int64_t work) {
      const Tile t = tile_of<kRows>(p, work);
      fa::tile_count_begin(p, work, t.q0, kRows, kKeys);
      return Copies{t.q0, t.b * p.heads_q + t.h, t.b * p.heads_kv + t.hk, t.n_tiles};
    };
    // Key tile j of a work tile (K/V head kz) into the ring's next stage, once the consumers have freed it.
    auto copy_kv = [&](int kz, int j, int64_t work) {
      fa::tile_count_visit(p, work);
      const int s = Ring<kStages>::stage(kv);
      // TODO(5): before reusing stage s (reused), wait for the consumers' release of the tile it
      //   held, one round ago: the phase of empty[s] whose parity is the previous round's
      //   (mbar_wait_long, fa/hopper.cuh: this thread waits while the consumers compute).
      mark(ph::kWaitEmpty, j);
      mark(ph::kCopyKV, j);
      mbar_expect_tx(full + 8 * s, 2 * S::kv_bytes);
      for (int c = 0; c < D / kBlockCols; ++c) {
        tma_load(k_addr + s * S::kv_bytes + c * kKeys * 128, &tk, full + 8 * s, c * kBlockCols, j * kKeys, kz);
        tma_load(v_addr + s * S::kv_bytes + c * kKeys * 128, &tv, full + 8 * s, c * kBlockCols, j * kKeys, kz);
      }
      kv = (kv + 1) % (2 * kStages);
      reused = reused || kv == kStages;
    };
    Copies c{};
    int early = 0;  // key tiles of tile w already copied before its rendezvous (step 4)
    if (tid == 0) {
      work_slot[0] = w;
      if (w < n_work) c = copies_of(w);
    }
    for (int iter = 0;; ++iter) {
      mark(ph::kRendezvous, 0);
      for (int wg = 1; wg <= kConsumers; ++wg) named_sync(rendezvous(wg), kRendezvousThreads);  // all are done with Q, know w
      if (w >= n_work) break;
      int64_t next = n_work;
      if (tid == 0) {
        mark(ph::kCopyQ, w);
        mbar_expect_tx(q_full, S::q_bytes);
        for (int cb = 0; cb < D / kBlockCols; ++cb) tma_load(q_addr + cb * kRows * 128, &tq, q_full, cb * kBlockCols, c.q0, c.qz);
        for (int j = early; j < c.n_tiles; ++j) copy_kv(c.kz, j, w);
        // The next work tile: the counter's next value (step 4), or none (one tile a block).
        next = Scheduler<kPersistent>::next(counter, n_work);
        work_slot[(iter + 1) & 1] = next;
        // Its first key tiles go into the ring now, before the rendezvous: only Q's buffer must
        // wait for it. Their stages held this tile's key tiles n - kStages .. n - 3, which the
        // consumers release before their last softmax; n - 2's comes just before the rendezvous
        // (waiting for it here would hold the consumers there), and n - 1's after it.
        early = 0;
        if (next < n_work) {
          c = copies_of(next);
          for (; early < min(c.n_tiles, kStages - 2); ++early) copy_kv(c.kz, early, next);
        }
      }
      w = __shfl_sync(0xffffffffu, next, 0);
    }
  }
}

}  // namespace lesson13
