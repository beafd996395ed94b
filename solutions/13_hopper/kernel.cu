// Lesson 13: the forward on Hopper's own instructions (sm_90a), warp-specialised.
//   TMA       Q, K and V tiles are copied by the tensor-memory accelerator (cp.async.bulk.tensor),
//             described by tensor maps built on the host, 128-byte swizzled (wgmma.hpp);
//   mbarrier  each copy completes on a shared-memory barrier that counts the bytes it expects;
//   wgmma     a warpgroup (4 warps) multiplies 64 rows at once: S = Q K^T from shared memory,
//             O += P V with P straight from S's registers;
//   roles     warpgroup 0 produces (one thread issues every copy), warpgroups 1 and 2 consume
//             (64 query rows each, 128 per work tile), with a ring of kStages K/V tiles between them;
//   schedule  four steps (the variants, kVariants below), the last a persistent grid: one block per SM takes
//             work tiles from a counter, and loads the next one's Q and K/V under this one's end.
// Contiguous (batch, heads, seqlen, head_dim) tensors; fp16 and bf16; head dims 64 and 128; causal
// (bottom-right aligned) and not; GQA.
#include <cuda.h>  // CUtensorMap and its enums (the header only: the driver is reached at run time)
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/hopper.cuh"
#include "fa/mma.cuh"
#include "fa/tensor_map.hpp"
#include "fa/wgmma.cuh"
#include "fa/params.hpp"
#include "fa/trace.cuh"
#include "trace.hpp"
#include "wgmma.hpp"

namespace {

using lesson13::kBlockCols;

constexpr int kRows = 128;      // query rows per block: 64 per consumer warpgroup
constexpr int kKeys = 128;      // keys per K/V tile
constexpr int kThreads = 384;   // 3 warpgroups

// This file's TODOs you have not written yet: delete an entry when its code is written.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// The schedule, step by step (the README's step table): 1 = each consumer warpgroup runs
// S = Q K^T, the softmax, then O += P V, one after the other; 2 = + intra-warpgroup overlap: the
// next tile's Q K^T and this tile's P V are issued together, and the softmax of the next tile runs
// while P V is still on the tensor cores; 3 = + ping-pong: the two consumer warpgroups take turns
// issuing their GEMMs (named barriers), so one's softmax runs under the other's GEMMs; 4 = + a
// persistent grid: one block per SM loops over work tiles, taken from a counter in global memory,
// and its producer loads the next tile's Q and first K/V tiles while the consumers finish this one.
// The lesson's variants are the steps, step 4 the default, and step 4 on a few blocks only (at most
// max_blocks; 0: one per SM), for the tests: each block then takes many work tiles.
struct StepVariant {
  const char* name;
  int step, max_blocks;
  const char* about;
};
constexpr StepVariant kVariants[] = {
    {"step4", 4, 0, "+ a persistent grid: one block per SM takes work tiles from a counter"},
    {"step1", 1, 0, "a block per work tile; each consumer warpgroup's S = Q K^T, softmax and O += P V one after the other"},
    {"step2", 2, 0, "+ overlap in a warpgroup: the next tile's Q K^T issued with this tile's P V"},
    {"step3", 3, 0, "+ ping-pong: the consumer warpgroups take turns issuing their GEMMs"},
    {"step4-1-block", 4, 1, "step 4 on 1 block (the tests: every work tile through one block)"},
    {"step4-2-blocks", 4, 2, "step 4 on 2 blocks (the tests: many work tiles a block)"},
    {"step4-5-blocks", 4, 5, "step 4 on 5 blocks (the tests: many work tiles a block)"},
};
// K/V tiles in flight: step 1 double-buffers; steps 2-4 keep 3 at d = 128 (all that fits beside Q:
// 32 KB + 3 x 64 KB) and 4 at d = 64, the fastest of 2-5 in the README's tile sweep (section 8).
__host__ __device__ constexpr int stages_of(int step, int d) { return step == 1 ? 2 : d == 64 ? 4 : 3; }

template <int D, int kStages>
struct Smem {
  static constexpr int q_bytes = kRows * D * 2, kv_bytes = kKeys * D * 2;
  static constexpr int q = 0, k = q_bytes, v = k + kStages * kv_bytes, bars = v + kStages * kv_bytes;
  static constexpr int slots = bars + 8 * (1 + 2 * kStages);  // after the barriers: the two work slots
  static constexpr int total = slots + 16 + 1024;              // and slack to align the base
};

// The mbarrier, TMA and named-barrier instructions (one PTX instruction each) are in
// fa/hopper.cuh; the wgmma instructions in fa/wgmma.cuh.
using fa::mbar_arrive;
using fa::mbar_expect_tx;
using fa::mbar_init;
using fa::mbar_wait;
using fa::named_arrive;
using fa::named_sync;
using fa::set_max_registers_dec;
using fa::set_max_registers_inc;
using fa::tma_load;

// ---- Work tiles ------------------------------------------------------------------------------------
// A work tile is kRows query rows of one (batch, head). They are numbered with the query tile
// fastest, so that the blocks running at one time share a few heads' K/V in L2, and causal, each
// head's heaviest (last) query tile first, so that its light ones fill the gaps at the end.
struct Tile {
  int q0, h, b, hk;
  int n_tiles;  // key tiles visited
  int n_full;   // tiles before n_full need no mask: every key exists and (causal) every row sees it
};
__device__ __forceinline__ Tile tile_of(const fa::AttnParams& p, int64_t w) {
  const int n_qtiles = fa::ceil_div(p.seqlen_q, kRows);
  const int rank = int(w % n_qtiles);
  const int64_t hb = w / n_qtiles;
  Tile tl;
  tl.h = int(hb % p.heads_q);
  tl.b = int(hb / p.heads_q);
  tl.hk = tl.h / (p.heads_q / p.heads_kv);
  const int qtile = p.causal ? n_qtiles - 1 - rank : rank;
  const int q0 = qtile * kRows, offset = p.seqlen_k - p.seqlen_q;
  int k_end = p.seqlen_k;
  if (p.causal) k_end = min(p.seqlen_k, min(q0 + kRows, p.seqlen_q) + offset);
  tl.n_tiles = k_end > 0 ? fa::ceil_div(k_end, kKeys) : 0;
  const int n_full = p.causal ? max(0, min(p.seqlen_k / kKeys, (q0 + offset + 1) / kKeys)) : p.seqlen_k / kKeys;
  tl.q0 = q0;
  tl.n_full = n_full;
  return tl;
}

// ---- The kernel ------------------------------------------------------------------------------------
// Steps 1-3: a grid of (query tiles, heads, batch) blocks, one work tile each. Step 4: gridDim.x
// blocks (one per SM); block i starts with tile i and then takes the next from `counter` (zero at
// launch) until all n_work are taken.
//
// Between work tiles the producer and each consumer warpgroup meet at a rendezvous, a named
// barrier of the warpgroup's 128 threads and the producer's warp (ids 1 and 2; ping-pong uses 3
// and 4). A warpgroup reaches it once its last Q K^T of a tile is done, so after it Q's buffer may
// take the next tile's rows; and the producer has written the next tile's number in a work slot
// before it, so after it the warpgroup reads it. Two work slots, alternating: the slot of tile t + 2
// is written after the rendezvous of tile t + 1, which each warpgroup reaches after reading tile t's.
//
// kTrace (trace.hpp): thread 0 of each warpgroup records the SM's clock at every change of phase
// (mark below); the other instantiations compile the marks away.
constexpr int kRendezvousThreads = 128 + 32;
template <class T, int D, int kStep, bool kTrace>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_kernel(const fa::AttnParams p, const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                  const __grid_constant__ CUtensorMap tv, int64_t n_work, unsigned long long* counter,
                  const lesson13::TraceSink trace) {
  constexpr int kStages = stages_of(kStep, D);
  constexpr bool kPersistent = kStep >= 4;
  using S = Smem<D, kStages>;
  extern __shared__ uint8_t smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes: align the tiles to it.
  const uint32_t base = (fa::smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_addr = base + S::q, k_addr = base + S::k, v_addr = base + S::v, bars = base + S::bars;
  // 8 bytes a barrier: Q loaded, then each stage's full and empty.
  const uint32_t q_full = bars, full = bars + 8, empty = bars + 8 + 8 * kStages;
  // The work slots (after the barriers): the tile each warpgroup does next (n_work: none left).
  volatile int64_t* work_slot = reinterpret_cast<volatile int64_t*>(smem_raw + (base - fa::smem_addr(smem_raw)) + S::slots);
  const int offset = p.seqlen_k - p.seqlen_q;

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  namespace ph = lesson13::phase;
  [[maybe_unused]] int n_marks = 0;
  auto mark = [&](int phase, int64_t key) {
    if constexpr (kTrace) {
      // 32-bit indices (the producer has 40 registers): the host checks lanes x capacity < 2^31.
      const int lane = 3 * int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) + wg;
      if (tid == 0) fa::trace_mark<true>(trace, lane, n_marks, phase, key, phase == ph::kExit);
    }
  };
  mark(ph::kSetup, 0);
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);  // the producer's arrive, with Q's bytes
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);   // the producer's arrive (with the bytes it expects)
      mbar_init(empty + 8 * s, 8);  // one arrive per consumer warp, once its wgmmas on the stage are done
    }
    fa::fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Producer: warp 0 runs the loop, its lane 0 issues every copy; the other three warps
    // only give their registers away.
    set_max_registers_dec<40>();
    if (tid < 32) {
      int64_t w = kPersistent ? int64_t(blockIdx.x) : blockIdx.x + gridDim.x * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
      // The ring's next position, counted across work tiles modulo 2 kStages, as the consumers
      // count it: its stage is kv % kStages and its round's parity kv / kStages. (A running 64-bit
      // count would cost the producer, with its 40 registers, one more.)
      int kv = 0;
      bool reused = false;  // past the first kStages copies: the next stage held a tile before
      // What the producer keeps of a work tile: its Q rows, its (batch, head) for Q and for K/V, and
      // how many key tiles it visits.
      struct Copies {
        int q0, qz, kz, n_tiles;
      };
      auto copies_of = [&](int64_t work) {
        const Tile t = tile_of(p, work);
        fa::tile_count_begin(p, work, t.q0, kRows, kKeys);
        return Copies{t.q0, t.b * p.heads_q + t.h, t.b * p.heads_kv + t.hk, t.n_tiles};
      };
      // Key tile j of a work tile (K/V head kz) into the ring's next stage, once the consumers have freed it.
      auto copy_kv = [&](int kz, int j, int64_t work) {
        fa::tile_count_visit(p, work);
        const int s = kv % kStages;
        // TODO(5): before reusing stage s (reused), wait for the consumers' release of the tile it
        //   held, one round ago: the phase of empty[s] whose parity is the previous round's.
        mark(ph::kWaitEmpty, j);
        // BEGIN SOLUTION
        if (reused) mbar_wait(empty + 8 * s, (kv / kStages) ^ 1);
        // END SOLUTION
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
        named_sync(1, kRendezvousThreads);  // both warpgroups are done with Q and know tile w
        named_sync(2, kRendezvousThreads);
        if (w >= n_work) break;
        int64_t next = n_work;
        if (tid == 0) {
          mark(ph::kCopyQ, w);
          mbar_expect_tx(q_full, S::q_bytes);
          for (int cb = 0; cb < D / kBlockCols; ++cb) tma_load(q_addr + cb * kRows * 128, &tq, q_full, cb * kBlockCols, c.q0, c.qz);
          for (int j = early; j < c.n_tiles; ++j) copy_kv(c.kz, j, w);
          // The next work tile: the counter's next value (step 4), or none (one tile a block).
          if (kPersistent) next = int64_t(gridDim.x) + int64_t(atomicAdd(counter, 1ull));
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
    mark(ph::kExit, 0);
    return;
  }

  // ---- Consumers: warpgroup 1 owns rows 0-63 of each work tile, warpgroup 2 rows 64-127.
  set_max_registers_inc<232>();
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
    const uint32_t kj = k_addr + (r % kStages) * S::kv_bytes;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      fa::wgmma_ss<T, kKeys>(sacc, lesson13::kmajor_desc(q_rows, kRows, kk), lesson13::kmajor_desc(kj, kKeys, kk), kk > 0);
    fa::wgmma_commit();
  };
  // O += P V: P's floats 8 kk .. 8 kk + 7 are the A registers of step kk (wgmma.hpp, a_element).
  auto issue_pv = [&](int r) {
    const uint32_t vj = v_addr + (r % kStages) * S::kv_bytes;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) fa::wgmma_rs<T, D>(o, pa[kk], lesson13::mnmajor_desc(vj, kKeys, kk), 1);
    fa::wgmma_commit();
  };
  auto wait_full = [&](int r) { mbar_wait(full + 8 * (r % kStages), (r / kStages) & 1); };
  // This warp is done with ring position r (its wgmmas on it have completed): one of the 8 arrivals.
  auto release = [&](int r) {
    if (lane == 0) mbar_arrive(empty + 8 * (r % kStages));
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
  // Ping-pong (steps 3-4): warpgroup 1 waits on named barrier 3, warpgroup 2 on 4; each passes the
  // turn to the other (arrive) once its GEMMs are issued. 256 = its own 128 threads + the other's 128.
  const int my_turn = 2 + wg, other_turn = 5 - wg;
  auto take_turn = [&] {
    if constexpr (kStep >= 3) named_sync(my_turn, 256);
  };
  auto pass_turn = [&](bool last) {
    // Warpgroup 2's last phase of a tile passes nothing: warpgroup 1 has no phase left to take it.
    if constexpr (kStep >= 3)
      if (!(last && wg == 2)) named_arrive(other_turn, 256);
  };

  mark(ph::kRendezvous, 0);
  named_sync(wg, kRendezvousThreads);
  int64_t work = work_slot[0];
  for (int iter = 0; work < n_work; ++iter) {
    tl = tile_of(p, work);
    mark(ph::kWaitQ, work);
    mbar_wait(q_full, iter & 1);  // Q is in
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    m[0] = m[1] = fa::kNegInf;
    l[0] = l[1] = 0.f;
    const int n = tl.n_tiles;
    if (n > 0) {
      if constexpr (kStep >= 3)
        if (wg == 2) named_arrive(other_turn, 256);  // warpgroup 1 goes first
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
        pass_turn(false);
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
          pass_turn(false);
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
    named_sync(wg, kRendezvousThreads);
    const int64_t next = work_slot[(iter + 1) & 1];
    if constexpr (kStep >= 2) {
      if (n > 0) {
        mark(ph::kWaitTurn, n - 1);
        take_turn();
        mark(ph::kIssue, n - 1);
        fa::wgmma_fence();
        issue_pv(kv + n - 1);
        pass_turn(true);
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
      if (row >= p.seqlen_q) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* orow = obase + int64_t(row) * p.o_stride.row;
#pragma unroll
      for (int i = 0; i < D / 2; i += 2)
        if ((i / 2) % 2 == hh) {
          const lesson13::RowCol rc = lesson13::acc_element(tid, i);
          *reinterpret_cast<uint32_t*>(orow + rc.col) = fa::pack2<T>(o[i] * inv, o[i + 1] * inv);
        }
      if (t == 0) p.lse[bh * p.seqlen_q + row] = sum > 0.f ? (m[hh] * sl2 + log2f(sum)) / fa::kLog2e : INFINITY;
    }
    work = next;
  }
  mark(ph::kExit, 0);
}

// ---- Host: tensor maps and the launch ------------------------------------------------------------
CUtensorMap make_map(const void* ptr, fa::DType t, int bh, int seqlen, int d, int rows) {
  return fa::make_tensor_map("13_hopper", ptr, t, bh, seqlen, d, rows);
}

// Work tiles: kRows query rows of one (batch, head) each.
int64_t work_tiles(const fa::AttnParams& p) { return int64_t(fa::ceil_div(p.seqlen_q, kRows)) * p.heads_q * p.batch; }

// Blocks a launch of this step and shape takes (steps 1-3: one per work tile; 4: one per SM).
int64_t blocks_of(const fa::AttnParams& p, int step, int max_blocks, int sm_count) {
  const int64_t n_work = work_tiles(p);
  return step < 4 ? n_work : std::min<int64_t>(n_work, max_blocks > 0 ? max_blocks : sm_count);
}

template <class T, int D, int kStep, bool kTrace>
void launch(const fa::AttnParams& p, int sm_count, int max_blocks, cudaStream_t stream, const lesson13::TraceSink& trace) {
  constexpr int smem = Smem<D, stages_of(kStep, D)>::total;
  static_assert(smem <= 227 * 1024, "over the H200's 227 KB of shared memory per block");
  auto kernel = hopper_kernel<T, D, kStep, kTrace>;
  static bool configured = false;
  if (!configured) {
    fa::allow_smem(kernel, smem);
    configured = true;
  }
  const CUtensorMap tq = make_map(p.q, p.dtype, p.batch * p.heads_q, p.seqlen_q, D, kRows);
  const CUtensorMap tk = make_map(p.k, p.dtype, p.batch * p.heads_kv, p.seqlen_k, D, kKeys);
  const CUtensorMap tv = make_map(p.v, p.dtype, p.batch * p.heads_kv, p.seqlen_k, D, kKeys);
  const int64_t n_work = work_tiles(p);
  if constexpr (kStep < 4) {
    const dim3 grid(fa::ceil_div(p.seqlen_q, kRows), p.heads_q, p.batch);
    kernel<<<grid, kThreads, smem, stream>>>(p, tq, tk, tv, n_work, nullptr, trace);
    FA_CHECK_LAUNCH();
  } else {
    // One block per SM (one fits: shared memory and registers), each looping over work tiles;
    // the counter hands out the tiles after the first gridDim.x, so it starts at zero.
    const int blocks = int(blocks_of(p, 4, max_blocks, sm_count));
    unsigned long long* counter = nullptr;
    FA_CUDA_CHECK(cudaMallocAsync(&counter, sizeof(*counter), stream));
    FA_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(*counter), stream));
    kernel<<<blocks, kThreads, smem, stream>>>(p, tq, tk, tv, n_work, counter, trace);
    FA_CHECK_LAUNCH();
    FA_CUDA_CHECK(cudaFreeAsync(counter, stream));
  }
}

// Step `step` of the schedule, the persistent grid (step 4) capped at max_blocks blocks (0: one per
// SM); with a trace sink, the traced kernel (fp16 only: one dtype is enough to see the schedule,
// and it halves the traced instantiations).
void run_step(const fa::AttnParams& p, int step, int max_blocks, cudaStream_t stream, const lesson13::TraceSink* trace = nullptr) {
  fa::throw_if_todos_left("13_hopper", lesson13::kWgmmaTodosLeft);
  fa::throw_if_todos_left("13_hopper", kTodosLeft);
  // Steps 1-3 launch a block per work tile on a (query tiles, heads, batch) grid; step 4's grid is
  // one block per SM, whatever the shape.
  if (step < 4 && (p.heads_q > 65535 || p.batch > 65535))
    throw fa::InvalidArgument("lesson 13_hopper: steps 1-3 need heads_q and batch at most 65535 (grid y, z; step 4 has no such limit)");
  const int sm_count = fa::current_device().sm_count;
  if (trace && p.dtype != fa::DType::kF16) throw fa::InvalidArgument("lesson 13_hopper: the trace runs fp16 only");
  auto go = [&](auto step_tag) {
    constexpr int kStep = decltype(step_tag)::value;
    if (trace) {
      if (p.head_dim == 64) launch<__half, 64, kStep, true>(p, sm_count, max_blocks, stream, *trace);
      else launch<__half, 128, kStep, true>(p, sm_count, max_blocks, stream, *trace);
    } else if (p.head_dim == 64) {
      FA_DISPATCH_DTYPE(p.dtype, T, (launch<T, 64, kStep, false>(p, sm_count, max_blocks, stream, {})));
    } else {
      FA_DISPATCH_DTYPE(p.dtype, T, (launch<T, 128, kStep, false>(p, sm_count, max_blocks, stream, {})));
    }
  };
  switch (step) {
    case 1: go(std::integral_constant<int, 1>{}); break;
    case 2: go(std::integral_constant<int, 2>{}); break;
    case 3: go(std::integral_constant<int, 3>{}); break;
    default: go(std::integral_constant<int, 4>{}); break;
  }
}

// The traced run's lanes: 3 warpgroups a block.
int64_t trace_lanes(const fa::AttnParams& p, int step, int max_blocks) {
  return 3 * blocks_of(p, step, max_blocks, fa::current_device().sm_count);
}

// FA_LESSON13_TRACE=FILE: the call runs the traced kernel and writes the records of the blocks that
// ran on SMs 0 .. FA_LESSON13_TRACE_SMS - 1 (default 2) to FILE as CSV, one row a record:
// step,sm,block,role,clock,phase,key. plots/plot.py --timeline draws them. Not for timing: the
// call waits for the kernel and copies the records back.
void write_trace(const fa::AttnParams& p, const StepVariant& v, const std::string& path, cudaStream_t stream) {
  fa::trace_to_csv("lesson 13_hopper", "FA_LESSON13_TRACE", path, 1 << 14, trace_lanes(p, v.step, v.max_blocks), 3, "step",
                   std::to_string(v.step), lesson13::phase_name, stream,
                   [&](const fa::TraceSink& sink) { run_step(p, v.step, v.max_blocks, stream, &sink); });
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  const StepVariant& v = kVariants[p.variant];
  if (const char* path = std::getenv("FA_LESSON13_TRACE")) write_trace(p, v, path, stream);
  else run_step(p, v.step, v.max_blocks, stream);
}

}  // namespace

const fa::LessonInfo& fa_lesson_13();

// The traced kernel's records, every block's three warpgroups (lane = block * 3 + warpgroup), of the
// call's variant (p.variant), for the lesson's GPU test; `capacity` events at most per warpgroup,
// else it throws. The call is validated first, as run_forward does.
std::vector<lesson13::TraceLane> fa_lesson13_trace(const fa::AttnParams& p, int capacity, cudaStream_t stream) {
  fa::validate_forward(fa_lesson_13(), p);
  const StepVariant& v = kVariants[p.variant];
  return fa::run_traced("lesson 13_hopper", trace_lanes(p, v.step, v.max_blocks), 3, capacity, "FA_LESSON13_TRACE_EVENTS", stream,
                        [&](const fa::TraceSink& sink) { run_step(p, v.step, v.max_blocks, stream, &sink); });
}

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_13_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_13_declared();

const fa::LessonInfo& fa_lesson_13() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_13_declared();
    l.forward = &forward;
    for (const StepVariant& v : kVariants) l.variants.push_back({v.name, v.about});
    l.max_batch_heads = INT32_MAX;  // TMA's coordinates are 32-bit
    return l;
  }();
  return info;
}
